from promptlab.cli import console

console()
