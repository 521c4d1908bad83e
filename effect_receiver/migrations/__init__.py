"""Alembic migrations of the receiver's database (a package so that they ship with the wheel)."""
