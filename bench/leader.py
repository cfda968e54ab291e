
x: int = 1
