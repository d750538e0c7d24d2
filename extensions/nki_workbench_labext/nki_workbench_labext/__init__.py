"""Prebuilt JupyterLab extension rendering nki_workbench Inspections (see docs/mime.md)."""

__version__ = "0.1.0"

MIME_TYPE = "application/vnd.nki-workbench.inspection+json"


def _jupyter_labextension_paths():
    """Where `jupyter labextension develop` finds the built extension (JupyterLab's hook)."""
    return [{"src": "labextension", "dest": "nki-workbench-labext"}]
