"""One module or package per notebook: the logic the notebook shows, tested here rather than in cells."""
