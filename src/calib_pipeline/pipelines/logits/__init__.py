"""Logits and labels of every split for every (method, seed): the interface to all later stages."""
