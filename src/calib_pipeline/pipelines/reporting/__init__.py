"""Scoring cached logits into the tidy metrics table, and paper-style tables and figures."""
