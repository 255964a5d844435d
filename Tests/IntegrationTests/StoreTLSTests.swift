import Foundation
import NIOPosix
import NIOSSL
import PostgresNIO
import PushFakes
import Testing
@testable import WhisperShared

/// TLS and authentication to both stores, against real servers with certificates from a
/// CA made at run time: Redis over `rediss://` with an ACL user, Postgres with
/// `sslmode=verify-full` (scripts/test starts the test Postgres with TLS on as well).
@Suite struct StoreTLSTests {
    /// A client on `configuration` that is used once it has connected.
    private func withClient<T: Sendable>(_ configuration: RedisConfiguration, _ body: (RedisClient) async throws -> T) async throws -> T {
        let client = RedisClient(configuration: configuration, logger: TestServers.logger)
        let task = Task { try await client.run() }
        defer { task.cancel() }
        try await waitUntil { client.isConnected }
        return try await body(client)
    }

    @Test func redisOverTLSWithAnACLUserAndTheOperatorsCA() async throws {
        let certificates = try TestCertificates.make()
        defer { certificates.removeFiles() }
        let server = try RedisProcess(tls: (certificates.serverCertificatePath, certificates.serverKeyPath))
        try server.start()
        defer { server.kill() }

        var admin = try #require(RedisConfiguration(url: server.url))
        #expect(admin.tls)
        admin.caFile = certificates.caPath
        try await withClient(admin) { redis in
            // The rule docs/operations.md suggests ("TLS to the stores").
            try await redis.send("ACL", "SETUSER", "whisper-app", "on", ">app-secret", "~*", "&*", "+@all", "-@dangerous", "+config|get")
        }

        // The application's user, by URL, with the CA from the setting.
        var app = try #require(RedisConfiguration(url: "rediss://whisper-app:app-secret@127.0.0.1:\(server.port)"))
        app.caFile = certificates.caPath
        app.clientName = "whisper-test"
        try await withClient(app) { redis in
            try await redis.send("SET", "tls:key", "over TLS")
            #expect(try await redis.send("GET", "tls:key").string == "over TLS")
            #expect(try await redis.send("ACL", "WHOAMI").string == "whisper-app")
            // What the services run: scripts, and the start-up check's CONFIG GET.
            #expect(try await redis.evaluate(RedisScript("return redis.call('GET', KEYS[1])"), keys: ["tls:key"]).string == "over TLS")
            #expect(try await RedisServerCheck.problems(on: redis, required: .always) == [])
            await #expect(throws: RedisError.self) { try await redis.send("FLUSHALL") }
            // Pub/sub rides the same TLS connection code.
            let subscriber = RedisSubscriber(configuration: app, channels: ["tls:channel"], logger: TestServers.logger)
            let subscription = Task { try await subscriber.run() }
            defer { subscription.cancel() }
            try await waitUntil { subscriber.isSubscribed }
            try await redis.send("PUBLISH", "tls:channel", "heard")
            let messages = subscriber.messages
            #expect(try await withTimeout("a message over TLS") { await messages.first { _ in true } }?.payload == Array("heard".utf8))
        }

        // A wrong password, and a certificate the client has no CA for, are refused.
        var wrong = app
        wrong.password = "not-the-secret"
        await #expect(throws: RedisError.self) { try await RedisConnection.connect(to: wrong, eventLoopGroup: .singletonMultiThreadedEventLoopGroup) }
        var untrusted = app
        untrusted.caFile = nil
        await #expect(throws: (any Error).self) { try await RedisConnection.connect(to: untrusted, eventLoopGroup: .singletonMultiThreadedEventLoopGroup) }
        // And a plain connection learns nothing from a TLS port.
        var plain = app
        plain.tls = false
        await #expect(throws: (any Error).self) {
            let connection = try await RedisConnection.connect(to: plain, eventLoopGroup: .singletonMultiThreadedEventLoopGroup)
            _ = try await connection.send(RedisCommand("PING"))
        }
    }

    @Test func theSettingsTakeRedissAndACAFileOnlyTogether() throws {
        let certificates = try TestCertificates.make()
        defer { certificates.removeFiles() }
        let good = SettingsReader.environment([
            "WHISPER_POSTGRES_URL": "postgres://whisper@127.0.0.1/whisper", "WHISPER_REDIS_URL": "rediss://app:secret@redis.internal:6380",
            "WHISPER_REDIS_CA_FILE": certificates.caPath,
        ])
        let settings = CommonSettings(service: "auth", defaultPort: 8081, from: good)
        try good.validate()
        #expect(settings.redis.tls && settings.redis.caFile == certificates.caPath)
        #expect(settings.redis.username == "app" && settings.redis.port == 6380)

        let plain = SettingsReader.environment([
            "WHISPER_POSTGRES_URL": "postgres://whisper@127.0.0.1/whisper", "WHISPER_REDIS_URL": "redis://redis.internal",
            "WHISPER_REDIS_CA_FILE": certificates.caPath,
        ])
        _ = CommonSettings(service: "auth", defaultPort: 8081, from: plain)
        #expect(throws: (any Error).self) { try plain.validate() }
    }

    @Test func postgresVerifiedAgainstTheOperatorsCA() async throws {
        let ca = try #require(TestServers.environment["WHISPER_TEST_POSTGRES_CA_FILE"], "scripts/test starts Postgres with TLS")
        let base = try #require(PostgresSettings(url: TestServers.postgresURL))
        for host in ["localhost", "127.0.0.1"] {
            var settings = try #require(PostgresSettings(url: "postgres://\(base.username)@\(host):\(base.port)/\(base.database)?sslmode=verify-full"))
            settings.caFile = ca
            #expect(try await Self.queryOverTLS(settings) == true, "\(host)")
        }
        var byURL = try #require(PostgresSettings(url: "postgres://\(base.username)@localhost:\(base.port)/\(base.database)?sslmode=verify-ca&sslrootcert=\(ca)"))
        #expect(byURL.caFile == ca)
        #expect(try await Self.queryOverTLS(byURL) == true)

        // Another CA's certificate is refused: the connection never opens.
        let others = try TestCertificates.make()
        defer { others.removeFiles() }
        byURL.caFile = others.caPath
        await #expect(throws: (any Error).self) { try await Self.queryOverTLS(byURL) }
    }

    /// Whether the server says this connection is encrypted: one connection, made with
    /// the TLS the settings ask for (a refusal is an error at once, not a pool's retries).
    private static func queryOverTLS(_ settings: PostgresSettings) async throws -> Bool? {
        let configuration = PostgresConnection.Configuration(
            host: settings.host, port: settings.port, username: settings.username, password: settings.password, database: settings.database,
            tls: .require(try NIOSSLContext(configuration: settings.tlsConfiguration))
        )
        let connection = try await PostgresConnection.connect(
            on: MultiThreadedEventLoopGroup.singleton.any(), configuration: configuration, id: 1, logger: TestServers.logger
        ).get()
        defer { Task { try? await connection.close() } }
        let rows = try await connection.query("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", logger: TestServers.logger)
        for try await ssl in rows.decode(Bool.self) {
            return ssl
        }
        return nil
    }
}
