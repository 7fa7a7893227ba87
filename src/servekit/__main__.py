from servekit.cli import main

main()
