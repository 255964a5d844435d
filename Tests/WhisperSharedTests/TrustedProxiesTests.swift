import Testing
import WhisperShared

@Suite struct TrustedProxiesTests {
    @Test func rangesAndAddressesParseAndMatch() throws {
        let proxies = try #require(TrustedProxies("10.0.0.0/8, 192.168.1.7 ,fd00::/8"))
        #expect(proxies.contains("10.200.3.4"))
        #expect(!proxies.contains("11.0.0.1"))
        #expect(proxies.contains("192.168.1.7"))
        #expect(!proxies.contains("192.168.1.8"))
        #expect(proxies.contains("fd12:3456::1"))
        #expect(!proxies.contains("fe80::1"))
        #expect(!proxies.contains("not an address"))
        #expect(TrustedProxies("")?.isEmpty == true)
        #expect(TrustedProxies("10.0.0.0/33") == nil)
        #expect(TrustedProxies("10.0.0/8") == nil)
        #expect(TrustedProxies("proxy.internal") == nil)
        #expect(TrustedProxies("0.0.0.0/0")?.contains("203.0.113.1") == true)
    }

    @Test func theClientIsTheNearestUntrustedHopAndOnlyATrustedPeerIsBelieved() throws {
        let proxies = try #require(TrustedProxies("10.0.0.0/8"))
        // From a trusted proxy: the rightmost hop that is not a proxy, whatever the client claims to its left.
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["6.6.6.6, 203.0.113.7"]) == "203.0.113.7")
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["6.6.6.6", "203.0.113.7, 10.2.2.2"]) == "203.0.113.7")
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["[2001:db8::7]"]) == "2001:db8::/64")
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["203.0.113.7:4711"]) == "203.0.113.7")
        // One spelling per client.
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["2001:DB8:0:0::7"]) == "2001:db8::/64")
        // No header, or only proxies in it: the last proxy.
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: []) == "10.1.1.1")
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["10.3.3.3"]) == "10.3.3.3")
        // Garbage where the client's address should be: never a key.
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["evil-bucket-name"]) == "10.1.1.1")
        #expect(proxies.clientAddress(peer: "10.1.1.1", forwardedFor: ["203.0.113.7, garbage, 10.2.2.2"]) == "10.2.2.2")
        // From anyone else the header is ignored.
        #expect(proxies.clientAddress(peer: "203.0.113.9", forwardedFor: ["1.2.3.4"]) == "203.0.113.9")
        #expect(TrustedProxies.none.clientAddress(peer: "10.1.1.1", forwardedFor: ["1.2.3.4"]) == "10.1.1.1")
    }

    @Test func anIPv6ClientIsItsPrefixAndAMappedIPv4AddressIsThatAddress() throws {
        var proxies = TrustedProxies.none
        // Every address of one /64 (the default) is one client, from a proxy or not.
        let one = ["2001:db8:1:2::7", "2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:DB8:1:2:0:0:0:1"].map { proxies.clientAddress(peer: $0, forwardedFor: []) }
        #expect(Set(one) == ["2001:db8:1:2::/64"])
        #expect(proxies.clientAddress(peer: "2001:db8:1:3::7", forwardedFor: []) == "2001:db8:1:3::/64")
        #expect(try #require(TrustedProxies("10.0.0.0/8")).clientAddress(peer: "10.1.1.1", forwardedFor: ["2001:db8:1:2::9"]) == "2001:db8:1:2::/64")
        #expect(proxies.clientAddress(peer: "::ffff:203.0.113.7", forwardedFor: []) == "203.0.113.7")
        #expect(proxies.clientAddress(peer: "203.0.113.7", forwardedFor: []) == "203.0.113.7")
        #expect(proxies.clientAddress(peer: "::1", forwardedFor: []) == "::/64")
        // Another prefix length, and a whole address.
        proxies.ipv6Prefix = 48
        #expect(proxies.clientAddress(peer: "2001:db8:1:2::7", forwardedFor: []) == "2001:db8:1::/48")
        proxies.ipv6Prefix = 56
        #expect(proxies.clientAddress(peer: "2001:db8:1:2ff::7", forwardedFor: []) == "2001:db8:1:200::/56")
        proxies.ipv6Prefix = 128
        #expect(proxies.clientAddress(peer: "2001:db8:1:2::7", forwardedFor: []) == "2001:db8:1:2::7")
        // Not an address: kept as it came (the channel's "unknown").
        #expect(proxies.clientAddress(peer: "unknown", forwardedFor: []) == "unknown")
    }
}
