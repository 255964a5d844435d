import Testing
@testable import WhisperShared

/// The limit registry: one entry per limit, each read from its own variable.
@Suite struct LimitRegistryTests {
    @Test func everyLimitHasItsOwnKeyAndAVariableOfItsService() {
        let keys = Limit.registry.map(\.key)
        #expect(Set(keys).count == keys.count)
        let services = ["gateway.", "auth.", "router.", "turn.cred.", "attachment.signer.", "admin.", "whisper."]
        for limit in Limit.registry {
            #expect(services.contains { limit.key.hasPrefix($0) }, "\(limit.key) names no service")
            #expect(limit.variable == limit.key.uppercased().replacingOccurrences(of: ".", with: "_"))
            #expect(!limit.counts.isEmpty)
            #expect(RateLimitRule(limit.standardText) == limit.standard, "\(limit.key)'s default \(limit.standardText) does not parse")
        }
    }

    @Test func limitsThatShareABucketNameCountDifferentThings() {
        // Two limits may share a bucket name only when their keys cannot meet: the
        // same name at the same scope would charge one bucket for both.
        var seen: [String: Limit] = [:]
        for limit in Limit.registry {
            let id = "\(limit.bucket)/\(limit.scope.rawValue)/\(limit.key.split(separator: ".").first ?? "")"
            #expect(seen[id] == nil, "\(limit.key) and \(seen[id]?.key ?? "") share a bucket")
            seen[id] = limit
        }
    }

    @Test func aServiceReadsItsOwnLimitsAndNoOthers() throws {
        let reader = SettingsReader.environment([
            "GATEWAY_RATE_LIMIT_SEND_PER_SENDER": "7/10s",
            "AUTH_RATE_LIMIT_REPORT_PER_IDENTITY": "3/1h",
        ])
        let gateway = LimitRules(from: reader, service: "gateway")
        let auth = LimitRules(from: reader, service: "auth")
        try reader.validate()
        #expect(gateway[.sendPerSender] == RateLimitRule(capacity: 7, period: .seconds(10)))
        #expect(gateway[.reportPerIdentity] == Limit.reportPerIdentity.standard)
        #expect(auth[.reportPerIdentity] == RateLimitRule(capacity: 3, period: .seconds(3_600)))
        #expect(auth[.sendPerSender] == Limit.sendPerSender.standard)
    }

    @Test func aSharedLimitIsReadUnderItsOlderPerServiceName() throws {
        let reader = SettingsReader.environment(["TURN_CRED_RATE_LIMIT_PER_IDENTITY": "5/60s", "ROUTER_RATE_LIMIT_SEND_PER_PAIR": "9/60s"])
        let router = LimitRules(from: reader, service: "router", shared: [.sendPerPair])
        let turn = LimitRules(from: reader, service: "turn-cred")
        try reader.validate()
        #expect(router[.sendPerPair] == RateLimitRule(capacity: 9, period: .seconds(60)))
        #expect(turn[.turnPerIdentity] == RateLimitRule(capacity: 5, period: .seconds(60)))
        #expect(reader.olderNamesUsed.map(\.older) == ["ROUTER_RATE_LIMIT_SEND_PER_PAIR"])
    }

    @Test func aMalformedRuleIsRefusedByItsVariable() {
        let reader = SettingsReader.environment(["ATTACHMENT_SIGNER_RATE_LIMIT_PRESIGN_PER_IDENTITY": "lots"])
        _ = LimitRules(from: reader, service: "attachment-signer")
        #expect(throws: (any Error).self) { try reader.validate() }
        #expect(reader.invalid.contains { $0.contains("ATTACHMENT_SIGNER_RATE_LIMIT_PRESIGN_PER_IDENTITY") })
    }

    @Test func theRefusalNamesWhatThereWereTooManyOf() {
        #expect(Limit.sendPerSender.refusal(retryAfterMs: 250) == "too many messages; retry in 250 ms")
        #expect(Limit.routedPerAddress.refusal(retryAfterMs: nil) == "too many frames from this address; slow down")
        #expect(Limit.callsPerPair.refused(retryAfterMs: 9).code == .rateLimited)
    }
}
