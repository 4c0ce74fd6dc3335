"""Reports of this family are registered here with @report (see reports.py)."""
