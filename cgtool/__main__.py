from cgtool.cli.main import main

main()
