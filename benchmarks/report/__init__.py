"""A run rendered as text: report.md's sections and tables, and the tables of the cost model and the K
schedule."""
