from tuiagent.cli import main

main()
