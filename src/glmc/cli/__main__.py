"""`python -m glmc.cli …` runs the `glmc` command; `accelerate launch -m glmc.cli …` starts it in many processes."""

from glmc.cli import main

if __name__ == "__main__":
    main(prog_name="glmc")
