"""A matrix from its file to its cells: the keys declared once, parsed, checked against the disk and the
engines' declared options, expanded."""
