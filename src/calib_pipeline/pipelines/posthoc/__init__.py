"""Post-hoc calibrators fitted on cached validation logits."""
