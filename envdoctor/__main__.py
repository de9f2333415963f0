from envdoctor.cli.main import main

main()
