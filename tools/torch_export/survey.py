"""The command line of `spmd.torch.survey` (see its docs): `pip install ./python` first."""

from spmd.torch.survey import main

if __name__ == "__main__":
    main()
