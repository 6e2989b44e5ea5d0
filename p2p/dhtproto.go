package p2p

// DHTPrefix is the protocol prefix of Spindle's private DHT, which keeps
// it apart from the public IPFS DHT. Package dht starts the DHT; the
// constants live here so that code which only recognises Spindle peers
// need not link kad-dht.
const DHTPrefix = "/spindle"

// DHTProtocol is the protocol the private DHT speaks: kad-dht's under
// [DHTPrefix].
const DHTProtocol = DHTPrefix + "/kad/1.0.0"
