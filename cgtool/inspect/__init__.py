"""Pure analysis of cgtool artifacts. Nothing here imports torch or touches a GPU."""
