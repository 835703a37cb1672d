import socket, struct
def hx(b): return " ".join("%02x"%x for x in b)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 47812)); s.settimeout(2)
dst = ("127.0.0.1", 47809)
def bvlc(npdu_apdu, fn=0x0a): return bytes([0x81, fn]) + struct.pack(">H", 4 + len(npdu_apdu)) + npdu_apdu
def rpm(invoke, objs, sa=False, maxresp=5, prop=85):
    body = b"".join(bytes([0x0c]) + struct.pack(">I", (t << 22) | i) + bytes([0x1e, 0x09, prop, 0x1f]) for t, i in objs)
    return bytes([0x01, 0x04, 0x02 if sa else 0x00, maxresp, invoke, 0x0e]) + body
def xchg(name, frame):
    s.sendto(frame, dst)
    print(name, "->", hx(frame)[:200])
    try:
        d, _ = s.recvfrom(2000); print("   <-", len(d), "bytes:", hx(d)[:300])
    except socket.timeout: print("   <- timeout")
xchg("RPM ai0,ai1", bvlc(rpm(7, [(0,0),(0,1)])))
xchg("RPM ai0, ai999(unknown)", bvlc(rpm(8, [(0,0),(0,999)])))
xchg("RPM 40 objs no SA", bvlc(rpm(9, [(0,i) for i in range(40)])))
xchg("RPM 40 objs SA, maxresp=3(480)", bvlc(rpm(10, [(0,i) for i in range(40)], sa=True, maxresp=3)))
xchg("RP ai0 pv", bvlc(bytes([0x01,0x04,0x00,0x05,11,0x0c,0x0c,0,0,0,0,0x19,0x55])))
xchg("RP unknown object", bvlc(bytes([0x01,0x04,0x00,0x05,12,0x0c,0x0c,0,0,0x03,0xe7,0x19,0x55])))
xchg("unknown service 0x63", bvlc(bytes([0x01,0x04,0x00,0x05,13,0x63])))
xchg("RPM malformed", bvlc(bytes([0x01,0x04,0x00,0x05,14,0x0e,0x0c,0,0])))
xchg("Who-Is 1001 unicast", bvlc(bytes([0x01,0x00,0x10,0x08,0x0a,0x03,0xe9,0x1a,0x03,0xe9])))
