import Testing
@testable import WhisperShared

@Suite struct ConfigurationTests {
    @Test func variableNamesFollowTheKeys() {
        #expect(SettingsReader.variableName("whisper.postgres.url") == "WHISPER_POSTGRES_URL")
        #expect(SettingsReader.variableName("push.sender.http.port") == "PUSH_SENDER_HTTP_PORT")
        #expect(SettingsReader.variableName("gateway.ws.ping.interval.seconds") == "GATEWAY_WS_PING_INTERVAL_SECONDS")
    }

    @Test func missingRequiredSettingsAreAllNamed() {
        let reader = SettingsReader.environment([:])
        _ = CommonSettings(service: "auth", defaultPort: 8081, from: reader)
        #expect(throws: ConfigurationError.self) { try reader.validate() }
        do {
            try reader.validate()
        } catch let error as ConfigurationError {
            #expect(error.missing == ["WHISPER_POSTGRES_URL", "WHISPER_REDIS_URL"])
            #expect(error.description.contains("WHISPER_POSTGRES_URL"))
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test func malformedValuesAreNamedWithTheProblem() {
        let reader = SettingsReader.environment([
            "WHISPER_POSTGRES_URL": "mysql://nope",
            "WHISPER_REDIS_URL": "redis://127.0.0.1:6379",
            "AUTH_HTTP_PORT": "eighty",
            "WHISPER_LOG_LEVEL": "loud",
        ])
        _ = CommonSettings(service: "auth", defaultPort: 8081, from: reader)
        do {
            try reader.validate()
            Issue.record("validate() should have thrown")
        } catch let error as ConfigurationError {
            #expect(error.missing.isEmpty)
            #expect(error.invalid.count == 3)
            #expect(error.invalid.contains { $0.hasPrefix("AUTH_HTTP_PORT must be a whole number") })
            #expect(error.invalid.contains { $0.hasPrefix("WHISPER_POSTGRES_URL must look like") })
            #expect(error.invalid.contains { $0.hasPrefix("WHISPER_LOG_LEVEL") })
        } catch {
            Issue.record("unexpected error \(error)")
        }
    }

    @Test func aCompleteEnvironmentIsReadWithDefaults() throws {
        let reader = SettingsReader.environment([
            "WHISPER_POSTGRES_URL": "postgres://whisper:s%40cret@db.internal:6432/whisper?sslmode=require",
            "WHISPER_REDIS_URL": "redis://:pw@cache:6380/2",
            "TURN_CRED_HTTP_PORT": "9000",
        ])
        let settings = CommonSettings(service: "turn-cred", defaultPort: 8085, from: reader)
        try reader.validate()
        #expect(settings.http.port == 9000)
        #expect(settings.http.host == "127.0.0.1")
        #expect(settings.postgres.host == "db.internal")
        #expect(settings.postgres.port == 6432)
        #expect(settings.postgres.password == "s@cret")
        #expect(settings.postgres.tlsMode == "require")
        #expect(settings.redis.host == "cache")
        #expect(settings.redis.port == 6380)
        #expect(settings.redis.password == "pw")
        #expect(settings.redis.database == 2)
        #expect(settings.logLevel == .info)
    }

    @Test func redisURLs() {
        #expect(RedisConfiguration(url: "redis://127.0.0.1") == RedisConfiguration(host: "127.0.0.1", port: 6379))
        #expect(RedisConfiguration(url: "redis://[::1]:7000")?.host == "::1")
        #expect(RedisConfiguration(url: "redis://[::1]:7000")?.port == 7000)
        #expect(RedisConfiguration(url: "redis://user:pw@h:1/3")?.username == "user")
        #expect(RedisConfiguration(url: "http://h") == nil)
        #expect(RedisConfiguration(url: "redis://h:99999") == nil)
        #expect(RedisConfiguration(url: "redis://h/x") == nil)
    }

    @Test func postgresURLs() {
        let settings = PostgresSettings(url: "postgresql://app@localhost/whisper")
        #expect(settings?.port == 5432)
        #expect(settings?.password == nil)
        #expect(PostgresSettings(url: "postgres://localhost/whisper") == nil, "a user is required")
        #expect(PostgresSettings(url: "postgres://u@h:5432") == nil, "a database is required")
        #expect(PostgresSettings(url: "postgres://u@h/db?sslmode=allow") == nil)
        #expect(PostgresSettings(url: "postgres://u@h/db?sslmode=verify-full")?.tlsMode == "verify-full")
        #expect(PostgresSettings(url: "postgres://u@h/db?sslmode=verify-ca&sslrootcert=/etc/ca%20bundle.pem")?.caFile == "/etc/ca bundle.pem")
    }
}

@Suite struct BackoffTests {
    @Test func ceilingsDoubleUpToTheMaximum() {
        let policy = Backoff.Policy(initial: .milliseconds(100), maximum: .seconds(1))
        let ceilings = (0..<6).map { Backoff.ceiling(policy: policy, attempt: $0) }
        #expect(ceilings == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800), .seconds(1), .seconds(1)])
        #expect(Backoff.ceiling(policy: policy, attempt: 10_000) == .seconds(1))
    }

    @Test func delaysStayWithinTheirCeilingAndResetStartsOver() {
        var backoff = Backoff(policy: .init(initial: .milliseconds(100), maximum: .seconds(2)))
        for attempt in 0..<20 {
            let delay = backoff.next()
            #expect(delay <= Backoff.ceiling(policy: backoff.policy, attempt: attempt))
            #expect(delay >= .milliseconds(10))
        }
        backoff.reset()
        #expect(backoff.attempt == 0)
        #expect(backoff.next() <= .milliseconds(100))
    }
}

@Suite struct StreamShardsTests {
    @Test func shardZeroKeepsTheStreamsNameAndAnIdentityStaysOnItsShard() {
        let shards = StreamShards(8)
        #expect(shards.keys("stream:router") == ["stream:router"] + (1..<8).map { "stream:router:\($0)" })
        let id = "WSP-ABCD-EFGH-JKLM"
        #expect(shards.shard(of: id) == shards.shard(of: id))
        #expect(shards.key("stream:push", for: id) == shards.key("stream:push", shard: shards.shard(of: id)))
        #expect(StreamShards.one.key("stream:router", for: id) == "stream:router")
        // Identities spread over the shards.
        let spread = Set((0..<200).map { shards.shard(of: "WSP-\($0)") })
        #expect(spread == Set(0..<8))
        #expect(StreamShards(0).count == 1 && StreamShards(10_000).count == StreamShards.maximum)
    }

    @Test func theCountIsReadAndDefaultsBySetUp() throws {
        func settings(_ values: [String: String]) throws -> CommonSettings {
            let reader = SettingsReader.environment(["WHISPER_POSTGRES_URL": "postgres://u@localhost/db", "WHISPER_REDIS_URL": "redis://localhost"].merging(values) { $1 })
            let common = CommonSettings(service: "router", defaultPort: 8080, from: reader)
            try reader.validate()
            return common
        }
        #expect(try settings([:]).redis.streamShards.count == 1)
        #expect(try settings(["WHISPER_REDIS_CLUSTER": "127.0.0.1:7000"]).redis.streamShards.count == 16)
        #expect(try settings(["WHISPER_STREAM_SHARDS": "4"]).redis.streamShards.count == 4)
        #expect(throws: (any Error).self) { _ = try settings(["WHISPER_STREAM_SHARDS": "0"]) }
    }
}
