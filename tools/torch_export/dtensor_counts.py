"""The command line of `spmd.torch.dtensor_counts` (see its docs): `pip install ./python` first."""

from spmd.torch.dtensor_counts import main

if __name__ == "__main__":
    main()
