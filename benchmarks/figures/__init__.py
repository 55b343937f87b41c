"""A run drawn: the shared figure style and each kind of run's figures."""
