"""`python -m kcheck` runs the command line, as `kcheck` does."""

from kcheck.cli import main

if __name__ == "__main__":
    main()
