import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The proxies whose `X-Forwarded-For` is believed (`WHISPER_TRUSTED_PROXIES`: addresses
/// and CIDR ranges, IPv4 or IPv6, comma-separated). Behind a proxy every connection
/// comes from the proxy's address, so per-address limits would put all clients in one
/// bucket; the proxy says who the client is, and only a configured proxy is believed.
public struct TrustedProxies: Sendable, Equatable {
    struct Network: Sendable, Equatable {
        var bytes: [UInt8]
        var prefix: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == bytes.count else { return false }
            var left = prefix
            for index in bytes.indices where left > 0 {
                let bits = min(8, left)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if address[index] & mask != bytes[index] & mask { return false }
                left -= bits
            }
            return true
        }
    }

    let networks: [Network]
    /// How many leading bits of an IPv6 client address name the client
    /// (`WHISPER_CLIENT_IPV6_PREFIX`, 64 by default): one subscriber is given a whole
    /// /64 (or more), so counting /128s would give each billions of addresses.
    public var ipv6Prefix: Int = Self.standardIPv6Prefix

    public static let standardIPv6Prefix = 64
    public static let none = TrustedProxies(networks: [])

    init(networks: [Network]) {
        self.networks = networks
    }

    /// Parses `10.0.0.0/8, 192.168.1.7, fd00::/8`; nil when an entry is not an address
    /// or a range (an empty list is `none`).
    public init?(_ list: String) {
        var networks: [Network] = []
        for entry in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            let parts = entry.split(separator: "/", maxSplits: 1).map(String.init)
            guard let bytes = Self.parse(parts[0]) else { return nil }
            var prefix = bytes.count * 8
            if parts.count == 2 {
                guard let value = Int(parts[1]), (0...bytes.count * 8).contains(value) else { return nil }
                prefix = value
            }
            networks.append(Network(bytes: bytes, prefix: prefix))
        }
        self.networks = networks
    }

    public var isEmpty: Bool { networks.isEmpty }

    public func contains(_ address: String) -> Bool {
        guard let bytes = Self.parse(address) else { return false }
        return networks.contains { $0.contains(bytes) }
    }

    /// The client as every per-address limit keys it: its address (the peer's, unless the
    /// peer is a trusted proxy; then the nearest address in `X-Forwarded-For`, read right
    /// to left, that is not itself a trusted proxy), as ``clientKey(_:)`` writes it. An
    /// entry that is not an address ends the search with the last trusted hop, so nothing
    /// but an address a trusted proxy wrote can become a key.
    public func clientAddress(peer: String, forwardedFor headers: [String]) -> String {
        guard !networks.isEmpty, contains(peer) else { return clientKey(peer) }
        var client = peer
        let hops = headers.flatMap { $0.split(separator: ",") }.map { Self.normalize(String($0)) }
        for hop in hops.reversed() {
            guard let bytes = Self.parse(hop) else { return clientKey(client) }
            client = hop
            if !networks.contains(where: { $0.contains(bytes) }) { return clientKey(hop) }
        }
        return clientKey(client)
    }

    /// One spelling per client: an IPv4 address as it is written, an IPv4 address mapped
    /// into IPv6 (`::ffff:203.0.113.7`) as that IPv4 address, and an IPv6 address as its
    /// network of ``ipv6Prefix`` bits (`2001:db8:1:2::/64`), so that every address of one
    /// subscriber's prefix shares its buckets. Anything else is kept as it came.
    public func clientKey(_ address: String) -> String {
        guard var bytes = Self.parse(address) else { return address }
        if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF {
            bytes = Array(bytes[12...])
        }
        guard bytes.count == 16 else { return Self.canonical(bytes) ?? address }
        let prefix = min(max(ipv6Prefix, 0), 128)
        guard prefix < 128 else { return Self.canonical(bytes) ?? address }
        for index in bytes.indices {
            let kept = min(max(prefix - 8 * index, 0), 8)
            bytes[index] &= UInt8(truncatingIfNeeded: 0xFF << (8 - kept))
        }
        return (Self.canonical(bytes) ?? address) + "/\(prefix)"
    }

    /// Strips spaces, IPv6 brackets and an IPv4 port (`203.0.113.7:4711`).
    static func normalize(_ text: String) -> String {
        var value = text.trimmingCharacters(in: .whitespaces)
        if value.hasPrefix("["), let end = value.firstIndex(of: "]") {
            value = String(value[value.index(after: value.startIndex)..<end])
        } else if value.filter({ $0 == ":" }).count == 1, let colon = value.firstIndex(of: ":") {
            value = String(value[..<colon])
        }
        return value
    }

    /// 4 or 16 bytes, or nil for anything that is not an IP address.
    static func parse(_ text: String) -> [UInt8]? {
        guard text.utf8.count <= 45 else { return nil }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }

    /// The usual text of an address (one spelling per address, so one bucket per client).
    static func canonical(_ bytes: [UInt8]) -> String? {
        var buffer = [CChar](repeating: 0, count: 64)
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let written = bytes.withUnsafeBytes { raw in inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) }
        guard written != nil else { return nil }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
