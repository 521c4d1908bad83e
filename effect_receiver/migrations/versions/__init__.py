"""Revisions of the receiver's schema, oldest first (a package so that they ship with the wheel)."""
