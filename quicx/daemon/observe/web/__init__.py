"""
The web dashboard (C{[web] listen}).

The web dashboard (C{[web] listen}; docs/operations.md, "Web dashboard"):
L{history} samples the daemon's figures every second; L{views} writes the
pages' documents; L{auth} decides who may see and who may act; L{stream}
sends the live updates; L{api} answers C{/api/}; L{site} puts them together
behind the gate, with the static pages of C{static/}.
"""
