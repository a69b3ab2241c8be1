#!/usr/bin/env python3
"""A plain TCP relay for scripts/zk: `zk-relay.py LISTEN:TARGET ...` forwards every connection made to 127.0.0.1:LISTEN
to 127.0.0.1:TARGET, both ways, for each pair. It understands nothing of what it carries.

Freeze it with SIGSTOP and thaw it with SIGCONT: while stopped, nothing passes and nobody is told (the sockets stay
open, new connections wait in the listen backlog) -- a network partition that neither side notices until its own
timeouts run out. Used to cut one ZooKeeper server off from the leader (scripts/zk start --quorum-relay N).
"""
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


def handler(target):
    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    return handle


async def main(pairs):
    servers = []
    for pair in pairs:
        listen, target = (int(p) for p in pair.split(":"))
        servers.append(await asyncio.start_server(handler(target), "127.0.0.1", listen))
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: zk-relay.py LISTEN:TARGET ...")
    asyncio.run(main(sys.argv[1:]))
