#!/usr/bin/env python3
"""Field-bus peers ontime did not write, for its protocol tests: a
Modbus/TCP server from pymodbus, a BACnet/IP device and client from
bacpypes3. Run with the environment scripts/setup.sh makes
(/var/cache/ontime/fieldbus/bin/python).

  fieldbus-peer.py modbus-server --port P [--unit 1] [--registers 1000]
  fieldbus-peer.py bacnet-device --port P --instance N [--objects 40]
                   [--max-apdu 1024] [--no-segmentation]
  fieldbus-peer.py bacnet-read --port P --device-port Q --objects 0-9
  fieldbus-peer.py modbus-poll [--host H] --port P [--unit U] --period-ms 20
                   --seconds 5 --log F

Holding register i holds i; input register i holds 2150 + i. The BACnet
device's analog-input i has present value 20 + i / 4. Servers run until
killed; the tests pause them (SIGSTOP) to make them answer slowly or not
at all. bacnet-read reads the present values of analog-input objects of
the device at 127.0.0.1:Q once (ReadPropertyMultiple) and prints one
"instance value" line each. modbus-poll reads holding registers 0-3 of
unit U (1) at H (127.0.0.1) every period on an absolute schedule, writing CLOCK_MONOTONIC ns
just before each request to F (one per line); a slot it could not keep
(it was stopped, or a read outlasted it) is skipped, not caught up, as
pollers do.
"""
import argparse
import asyncio
import sys
import time


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


def bacnet_device(a):
    from bacpypes3.app import Application
    from bacpypes3.argparse import SimpleArgumentParser
    from bacpypes3.local.analog import AnalogInputObject

    args = SimpleArgumentParser().parse_args(
        ["--name", "ontime-peer", "--instance", str(a.instance), "--address", f"127.0.0.1:{a.port}"])

    async def run():
        app = Application.from_args(args)
        dev = app.device_object
        dev.maxApduLengthAccepted = a.max_apdu
        if a.no_segmentation:
            dev.segmentationSupported = "no-segmentation"
        for i in range(a.objects):
            app.add_object(AnalogInputObject(
                objectIdentifier=("analog-input", i), objectName=f"ai-{i}",
                presentValue=20.0 + i / 4, statusFlags=[0, 0, 0, 0], units="degreesCelsius"))
        print("ready", flush=True)
        await asyncio.Future()

    asyncio.run(run())


def bacnet_read(a):
    from bacpypes3.app import Application
    from bacpypes3.argparse import SimpleArgumentParser
    from bacpypes3.pdu import Address
    from bacpypes3.primitivedata import ObjectIdentifier

    lo, hi = (int(x) for x in a.objects.split("-"))
    args = SimpleArgumentParser().parse_args(
        ["--name", "ontime-reader", "--instance", "4194000", "--address", f"127.0.0.1:{a.port}"])

    async def run():
        app = Application.from_args(args)
        spec = []
        for i in range(lo, hi + 1):
            spec += [ObjectIdentifier(("analog-input", i)), ["present-value"]]
        result = await asyncio.wait_for(
            app.read_property_multiple(Address(f"127.0.0.1:{a.device_port}"), spec), 10)
        for objid, _prop, _index, value in result:
            print(objid[1], value, flush=True)
        app.close()

    asyncio.run(run())


def modbus_poll(a):
    from pymodbus.client import AsyncModbusTcpClient

    async def run():
        client = AsyncModbusTcpClient(a.host, port=a.port, timeout=1, retries=0)
        await client.connect()
        period = a.period_ms * 1_000_000
        start = time.monotonic_ns() + period
        end = start + a.seconds * 1_000_000_000
        k = 0
        with open(a.log, "w") as log:
            while True:
                planned = start + k * period
                if planned >= end:
                    break
                now = time.monotonic_ns()
                if now < planned:
                    await asyncio.sleep((planned - now) / 1e9)
                elif now > planned + period // 2:
                    # Too late for this slot: skip to the next one due.
                    k = (now - start) // period + 1
                    continue
                log.write(f"{time.monotonic_ns()}\n")
                log.flush()
                await client.read_holding_registers(0, count=4, device_id=a.unit)
                k += 1
        client.close()

    asyncio.run(run())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("modbus-server")
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--unit", type=int, default=1)
    m.add_argument("--registers", type=int, default=1000)
    d = sub.add_parser("bacnet-device")
    d.add_argument("--port", type=int, required=True)
    d.add_argument("--instance", type=int, required=True)
    d.add_argument("--objects", type=int, default=40)
    d.add_argument("--max-apdu", type=int, default=1024)
    d.add_argument("--no-segmentation", action="store_true")
    r = sub.add_parser("bacnet-read")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--device-port", type=int, required=True)
    r.add_argument("--objects", required=True)
    q = sub.add_parser("modbus-poll")
    q.add_argument("--host", default="127.0.0.1")
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--unit", type=int, default=1)
    q.add_argument("--period-ms", type=int, required=True)
    q.add_argument("--seconds", type=int, required=True)
    q.add_argument("--log", required=True)
    a = p.parse_args()
    {"modbus-server": modbus_server, "bacnet-device": bacnet_device, "bacnet-read": bacnet_read,
     "modbus-poll": modbus_poll}[a.what](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
