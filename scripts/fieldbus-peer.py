#!/usr/bin/env python3
"""Field-bus peers ontime did not write, for its protocol tests: a
Modbus/TCP server from pymodbus. Run with the environment scripts/setup.sh
makes (/var/cache/ontime/fieldbus/bin/python).

  fieldbus-peer.py modbus-server --port P [--unit 1] [--registers 1000]

Holding register i holds i; input register i holds 2150 + i. The server
runs until killed; the test pauses it (SIGSTOP) to make it answer slowly
or not at all.
"""
import argparse
import asyncio
import sys


def modbus_server(a):
    from pymodbus.server import StartAsyncTcpServer
    from pymodbus.simulator import DataType, SimData, SimDevice

    n = a.registers
    holding = [SimData(address=0, values=list(range(n)), datatype=DataType.REGISTERS)]
    inputs = [SimData(address=0, values=[2150 + i for i in range(n)], datatype=DataType.REGISTERS)]
    bits = [SimData(address=0, values=False, datatype=DataType.BITS)]
    device = SimDevice(id=a.unit, simdata=(bits, bits, holding, inputs))
    print("ready", flush=True)
    asyncio.run(StartAsyncTcpServer(device, address=("127.0.0.1", a.port)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("modbus-server")
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--unit", type=int, default=1)
    m.add_argument("--registers", type=int, default=1000)
    a = p.parse_args()
    if a.what == "modbus-server":
        modbus_server(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
