import Foundation
import Testing
import WhisperClient
import WhisperShared

/// A router process is killed with SIGKILL while messages are in flight; nothing is lost.
@Suite struct RouterCrashTests {
    actor Tally {
        var accepted = 0
        func accept() -> Int {
            accepted += 1
            return accepted
        }
    }

    func launchRouter(database: PostgresSettings, redisURL: String, port: Int) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/router")
        process.environment = [
            "PATH": "/usr/bin:/bin",
            "WHISPER_POSTGRES_URL": "postgres://\(database.username)@\(database.host):\(database.port)/\(database.database)",
            "WHISPER_REDIS_URL": redisURL,
            "WHISPER_LOG_LEVEL": "warning",
            "ROUTER_HTTP_PORT": "\(port)",
            "ROUTER_CLAIM_AFTER_MS": "1000",
            "WHISPER_RATE_LIMIT_SEND_PER_PAIR": "100000/60s",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    @Test func aRouterKilledMidFlightLosesNothing() async throws {
        // Gateways and auth in this process; the two routers as real processes. The
        // messages are group copies, which go through the router stream, so the routers
        // are what dies with them in flight; GatewayCrashTests kills the gateway that
        // stores 1:1 messages.
        try await MessagingStack.start(routers: 0).running { stack in
            var routers: [Process] = []
            for _ in 0..<2 {
                let port = try TestServers.freePort()
                routers.append(try launchRouter(database: stack.database, redisURL: stack.redisServer.url, port: port))
                _ = try await HTTP.waitFor("http://127.0.0.1:\(port)/ready") { $0.status == 200 }
            }
            defer { for router in routers where router.isRunning { router.terminate() } }

            let pairs = 10
            let perPair = 100
            var senders: [TestUser] = []
            var recipients: [TestUser] = []
            var groups: [String] = []
            for _ in 0..<pairs {
                senders.append(try await stack.user(on: 0))
                recipients.append(try await stack.user(on: 1))
                groups.append(try await stack.streamGroup(senders.last!, [recipients.last!]))
            }
            let tally = Tally()
            let victim = routers[0]
            let sent = try await withThrowingTaskGroup(of: [String].self) { group in
                for index in 0..<pairs {
                    let sender = senders[index]
                    let recipient = recipients[index]
                    let groupId = groups[index]
                    group.addTask {
                        var ids: [String] = []
                        for number in 0..<perPair {
                            let message = sender.copy("message \(number)", to: recipient, in: groupId)
                            // Resend until accepted: the same messageId, so never twice.
                            var attempts = 0
                            while true {
                                attempts += 1
                                do {
                                    try await sender.connection.send(message, timeout: .seconds(2))
                                    break
                                } catch WhisperClientError.timedOut where attempts < 30 {
                                    continue
                                }
                            }
                            ids.append(message.messageId)
                            if await tally.accept() == 300 {
                                kill(victim.processIdentifier, SIGKILL)
                            }
                        }
                        return ids
                    }
                }
                var all: [String] = []
                for try await ids in group { all += ids }
                return all
            }
            #expect(!victim.isRunning)
            #expect(sent.count == pairs * perPair)

            // What each recipient got live, then whatever is still pending; deduplicated as a client does.
            var total = 0
            for (index, recipient) in recipients.enumerated() {
                var dedupe = MessageDeduplicator()
                var distinct: Set<String> = []
                // Nobody acknowledges here, so every accepted message is still pending: the
                // live copies (however many arrived by now) only add duplicates to drop.
                for frame in await recipient.events.all(.messageReceived) {
                    guard let message = frame.payload(as: MessageReceived.self) else { continue }
                    _ = try MessageCrypto.open(message, by: (recipient.whisperId, recipient.keys), sender: senders[index].peerKeys)
                    if dedupe.firstSighting(message.messageId, in: message.from) { distinct.insert(message.messageId) }
                }
                var cursor: String?
                repeat {
                    let page = try await recipient.connection.fetchPending(cursor: cursor, limit: 200)
                    for message in page.messages where dedupe.firstSighting(message.messageId, in: message.from) {
                        distinct.insert(message.messageId)
                    }
                    cursor = page.nextCursor
                } while cursor != nil
                #expect(distinct.count == perPair, "recipient \(index) has \(distinct.count) of \(perPair)")
                total += distinct.count
            }
            #expect(total == pairs * perPair)
            for router in routers where router.isRunning {
                router.terminate()
                router.waitUntilExit()
            }
        }
    }
}

/// A frame whose handling fails every time is given up after ten tries, and its sender told.
@Suite struct PoisonEntryTests {
    @Test func anEntryThatAlwaysFailsIsAbandonedAndItsSenderTold() async throws {
        try await MessagingStack.start(routers: 1) { $0.claimAfter = .milliseconds(500) }.running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            // Postgres answers errors from now on for identity lookups: a failure no retry fixes.
            let postgres = IdentityTests.Stack(database: stack.database, auth: stack.auth, gateways: [])
            _ = try await postgres.query("ALTER TABLE users RENAME TO users_gone")
            let renamed = try await postgres.query("SELECT to_regclass('public.users') IS NULL AND to_regclass('public.users_gone') IS NOT NULL")
            #expect(try renamed.first?.decode(Bool.self) == true, "the identities table is out of the routers' reach")
            do {
                try await alice.connection.send(alice.message("doomed", to: bob), timeout: .seconds(30))
                Issue.record("a message that cannot be handled was accepted")
            } catch WhisperClientError.refused(let code, _) {
                #expect(code == .internalError)
            }
            // Nothing stays pending in the group.
            try await waitUntil { try await stack.unacknowledgedEntries() == 0 }
        }
    }
}
