"""Hello from every rank, then a token passed once around a ring.

Run it with:  python -m ipympi.run -n 4 examples/hello.py
"""

from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
print(f"hello from rank {rank} of {size} on {MPI.Get_processor_name()}")

if size > 1:
    if rank == 0:
        comm.send({"token": 0, "path": [0]}, dest=1)
        token = comm.recv(source=size - 1)
        print(f"the token went around the ring: {token['path']} (count {token['token']})")
    else:
        token = comm.recv(source=rank - 1)
        token["token"] += 1
        token["path"].append(rank)
        comm.send(token, dest=(rank + 1) % size)
