"""The embedded tiny model set (models/tiny/): its torch definitions, training, and acceptance check."""
