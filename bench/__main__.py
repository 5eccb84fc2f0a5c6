"""``python -m bench``: the side-by-side benchmark (see ``bench/compare.py``)."""

from bench.compare import main

if __name__ == "__main__":
    main()
