from cgtool.cli.entry import main

main()
