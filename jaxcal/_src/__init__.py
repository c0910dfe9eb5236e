"""Private implementation of jaxcal (public names live in jaxcal/<name>.py)."""
