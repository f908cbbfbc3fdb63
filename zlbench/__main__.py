from zlbench.cli import main

main()
