"""Seeded, stratified train / val (/ meta-val) index splits."""
