"""A minimal Django project whose tasks Quicx runs (docs/integrations.md)."""
