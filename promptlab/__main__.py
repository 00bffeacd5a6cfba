from promptlab.cli import main

main()
