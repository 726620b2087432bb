"""Errors a user can act on. The CLI prints them as one line and exits 2; the library raises them
without knowing who called it. This module imports nothing of the project, so every layer can."""

from __future__ import annotations


class UserError(Exception):
    """An error the user can act on: a wrong argument, a missing thing, a refused action."""
