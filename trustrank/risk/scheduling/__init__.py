"""Scheduling replay: placement strategies (incl. FGD) and priority policies over a GPU
cluster trace, as NumPy arrays. No Django."""
