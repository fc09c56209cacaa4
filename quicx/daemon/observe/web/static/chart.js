// Line charts as inline SVG, drawn by hand: a time axis (the `span`
// seconds up to the newest sample), a value axis from 0 with round steps,
// and one polyline per series; a missing value (null) breaks its line.
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const MARGIN = { left: 52, right: 12, top: 10, bottom: 24 };

function svgElement(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// A round step (1, 2 or 5 times a power of ten) giving about `count` ticks up to `top`.
function niceStep(top, count) {
  const rough = top / count;
  const power = Math.pow(10, Math.floor(Math.log10(rough)));
  const fraction = rough / power;
  return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
}

// Seconds between time ticks: the smallest of these that gives at most 7.
const TIME_STEPS = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800];

function ago(seconds) {
  if (seconds === 0) return 'now';
  return seconds < 60 ? `−${seconds} s` : `−${seconds / 60} min`;
}

function tickLabel(value, step) {
  if (step >= 1) return value.toLocaleString('en-US');
  const digits = Math.min(6, Math.ceil(-Math.log10(step)));
  return value.toFixed(digits);
}

// Draw `series` ([{cls, points: [[time, value or null], ...]}]) into `svg`
// over the `span` seconds that end at `end`.
function drawChart(svg, series, end, span) {
  const width = svg.clientWidth || 600;
  const height = svg.clientHeight || 180;
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.replaceChildren();
  const inner = { w: width - MARGIN.left - MARGIN.right, h: height - MARGIN.top - MARGIN.bottom };
  const start = end - span;
  let top = 0;
  for (const line of series) {
    for (const [time, value] of line.points) {
      if (time >= start && value !== null && value > top) top = value;
    }
  }
  const step = niceStep(top > 0 ? top : 1, 4);
  const ceiling = Math.max(step, Math.ceil(top / step) * step);
  const x = (time) => MARGIN.left + ((time - start) / span) * inner.w;
  const y = (value) => MARGIN.top + inner.h - (value / ceiling) * inner.h;

  for (let value = 0; value <= ceiling + step / 2; value += step) {
    svg.append(svgElement('line', { class: 'grid', x1: MARGIN.left, x2: width - MARGIN.right, y1: y(value), y2: y(value) }));
    svg.append(svgElement('text', { class: 'tick y', x: MARGIN.left - 6, y: y(value) + 4 }, tickLabel(value, step)));
  }
  const every = TIME_STEPS.find((step) => span / step <= 6) || 1800;
  for (let back = 0; back <= span; back += every) {
    svg.append(svgElement('text', { class: 'tick x', x: x(end - back), y: height - 6 }, ago(back)));
  }
  svg.append(svgElement('line', { class: 'axis', x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: MARGIN.top + inner.h }));
  svg.append(svgElement('line', { class: 'axis', x1: MARGIN.left, x2: width - MARGIN.right, y1: MARGIN.top + inner.h, y2: MARGIN.top + inner.h }));

  for (const line of series) {
    let run = [];
    const flush = () => {
      if (run.length) svg.append(svgElement('polyline', { class: `line ${line.cls}`, points: run.join(' ') }));
      run = [];
    };
    for (const [time, value] of line.points) {
      if (time < start) continue;
      if (value === null) { flush(); continue; }
      run.push(`${x(time).toFixed(1)},${y(value).toFixed(1)}`);
    }
    flush();
  }
}

window.drawChart = drawChart;
