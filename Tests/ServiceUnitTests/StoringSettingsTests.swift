import Testing
import WhisperMessaging
import WhisperShared
@testable import GatewayService
@testable import RouterService

/// Gateways and routers store messages under the same rules, so
/// one variable sets both; each service's older name still works on its own.
@Suite struct StoringSettingsTests {
    private static let required = [
        "WHISPER_POSTGRES_URL": "postgres://whisper@127.0.0.1:5432/whisper",
        "WHISPER_REDIS_URL": "redis://127.0.0.1:6379",
        "WHISPER_INTERNAL_TOKEN": String(repeating: "t", count: 40),
        "GATEWAY_FLOOR_KEYS": "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=",
    ]

    private func read(_ extra: [String: String]) throws -> (GatewaySettings, RouterSettings, [String]) {
        let reader = SettingsReader.environment(Self.required.merging(extra) { $1 })
        let gateway = GatewaySettings(from: reader)
        let router = RouterSettings(from: reader)
        try reader.validate()
        return (gateway, router, reader.olderNamesUsed.map(\.older))
    }

    @Test func oneVariableSetsGatewaysAndRouters() throws {
        let (gateway, router, older) = try read([
            "WHISPER_RATE_LIMIT_SEND_PER_PAIR": "7/10s",
            "WHISPER_PENDING_MAX_MESSAGES": "42",
            "WHISPER_PENDING_MAX_BYTES": "100000",
            "WHISPER_IDENTITY_CACHE_SECONDS": "5",
            "WHISPER_UNKNOWN_IDENTITY_CACHE_SECONDS": "2",
        ])
        let expected = StoringSettings(
            pendingCapacity: PendingQueue.Capacity(messages: 42, bytes: 100_000),
            identityCacheTTL: .seconds(5), unknownIdentityTTL: .seconds(2)
        )
        for settings in [
            StoringSettings(pendingCapacity: gateway.pendingCapacity, identityCacheTTL: gateway.identityCacheTTL, unknownIdentityTTL: gateway.unknownIdentityTTL),
            StoringSettings(pendingCapacity: router.pendingCapacity, identityCacheTTL: router.identityCacheTTL, unknownIdentityTTL: router.unknownIdentityTTL),
        ] {
            #expect(settings == expected)
        }
        #expect(gateway.limits[.sendPerPair] == RateLimitRule("7/10s")!)
        #expect(router.limits[.sendPerPair] == RateLimitRule("7/10s")!)
        #expect(older.isEmpty)
    }

    @Test func defaultsAreAlike() throws {
        let (gateway, router, _) = try read([:])
        #expect(gateway.limits[.sendPerPair] == router.limits[.sendPerPair])
        #expect(gateway.limits[.sendPerPair] == RateLimitRule("300/60s")!)
        #expect(gateway.pendingCapacity == router.pendingCapacity)
        #expect(gateway.identityCacheTTL == router.identityCacheTTL)
        #expect(gateway.unknownIdentityTTL == router.unknownIdentityTTL)
    }

    @Test func olderPerServiceNamesAreReadAndNamed() throws {
        let (gateway, router, older) = try read([
            "ROUTER_RATE_LIMIT_SEND_PER_PAIR": "9/60s",
            "GATEWAY_PENDING_MAX_MESSAGES": "11",
        ])
        #expect(router.limits[.sendPerPair] == RateLimitRule("9/60s")!)
        #expect(gateway.limits[.sendPerPair] == RateLimitRule("300/60s")!)
        #expect(gateway.pendingCapacity.messages == 11)
        #expect(router.pendingCapacity.messages == PendingQueue.Capacity.standard.messages)
        #expect(Set(older) == ["ROUTER_RATE_LIMIT_SEND_PER_PAIR", "GATEWAY_PENDING_MAX_MESSAGES"])
    }

    @Test func theSharedNameWinsOverAnOlderOne() throws {
        let (gateway, router, older) = try read([
            "WHISPER_RATE_LIMIT_SEND_PER_PAIR": "50/60s",
            "ROUTER_RATE_LIMIT_SEND_PER_PAIR": "9/60s",
        ])
        #expect(router.limits[.sendPerPair] == RateLimitRule("50/60s")!)
        #expect(gateway.limits[.sendPerPair] == RateLimitRule("50/60s")!)
        #expect(older.isEmpty)
    }

    @Test func aBadValueIsNamedByTheVariableThatHoldsIt() {
        let reader = SettingsReader.environment(Self.required.merging(["ROUTER_PENDING_MAX_MESSAGES": "0"]) { $1 })
        _ = RouterSettings(from: reader)
        do {
            try reader.validate()
            Issue.record("validate() should have thrown")
        } catch let error as ConfigurationError {
            #expect(error.invalid.contains { $0.hasPrefix("ROUTER_PENDING_MAX_MESSAGES must be a whole number") })
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }
}
