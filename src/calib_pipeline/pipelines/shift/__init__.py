"""Shifted test sets (generated corruptions, official natural-shift sets) and their logits."""
