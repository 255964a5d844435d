import Foundation
import NIOCore
import PostgresNIO
import Testing
import WhisperClient
import WhisperMessaging
@testable import WhisperShared

/// `account_delete` from outside: an identity with messages, groups (one it owns, one it
/// is in), a live conversation, push-to-talk channels (one it owns, one it joined), a
/// contacts backup and an attachment is deleted; afterwards nothing names it in Postgres
/// or Redis but what is listed here with its reason, the others were told as for a member
/// leaving, its ID answers `NOT_FOUND` and is never given out again, and the key
/// directory publishes the deletion.
@Suite struct AccountDeletionTests {
    @Test func aDeletedIdentityLeavesNothingButItsIDAndOthersSeeItGone() async throws {
        try await AttachmentTests.start().running { signer in
            let stack = signer.stack
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1), carol = try await stack.user(on: 0)
            try await stack.makePeers([alice, bob, carol])
            let owned = try await alice.connection.createGroup(title: "alice's", memberIds: [bob.whisperId, carol.whisperId])
            let joined = try await bob.connection.createGroup(title: "bob's", memberIds: [alice.whisperId])
            _ = try await alice.connection.createLiveConversation(name: "talks")
            let ownChannel = try await alice.connection.createChannel(name: "alice's channel")
            _ = try await bob.connection.joinChannel(code: ownChannel.joinCode)
            let bobsChannel = try await bob.connection.createChannel(name: "bob's channel")
            _ = try await alice.connection.joinChannel(code: bobsChannel.joinCode)
            // A stranger alice wrote to, who never answered: she is in his peers (unanswered).
            let dan = try await stack.user(on: 1)
            let (_, toDan) = try await alice.sendAndWaitForArrival("hello stranger", to: dan)
            try await dan.connection.acknowledge(toDan)
            // Messages both ways: bob's to alice waits for her; hers to bob he acknowledges.
            try await bob.connection.send(bob.message("for alice", to: alice))
            let (_, received) = try await alice.sendAndWaitForArrival("for bob", to: bob)
            try await bob.connection.acknowledge(received)
            // Each tells the other they are typing: a throttle in each one's slot names the other.
            try await alice.connection.sendTyping(to: bob.whisperId, isTyping: true)
            try await bob.connection.sendTyping(to: alice.whisperId, isTyping: true)
            try await waitUntil { await alice.events.all(.peerTyping).count > 0 }
            let api = KeyTransparencyTests.api(stack)
            _ = try await api.pushContactsBackup(ContactsBackup(contacts: [.init(whisperId: bob.whisperId, addedAt: Clock.millisecondsNow(), displayName: "bob")]), keys: alice.keys, sessionToken: alice.token)
            // An attachment alice uploaded and sent to bob, who takes its message, and to
            // carol, who does not yet: only its expiry lets gc-worker delete it.
            let objectKey = try await GCTests.sendAttachment(signer, from: alice, to: [bob, carol])
            try await waitUntil {
                await bob.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self) }.contains { $0.message.attachment?.objectKey == objectKey }
            }
            for message in await bob.events.all(.messageReceived).compactMap({ $0.payload(as: MessageReceived.self) }) {
                try await bob.connection.acknowledge(message)
            }
            try await KeyTransparencyTests.waitForPublication(stack)

            // A request signed by another key, or for another identity, deletes nothing.
            let forged = try WhisperKeys(mnemonic: BIP39.generateMnemonic()).accountDeletion(whisperId: alice.whisperId)
            await #expect(throws: WhisperClientError.refused(.authFailed, "signature does not verify with the identity's signing key")) {
                _ = try await alice.connection.request(AccountDelete(sessionToken: alice.token, forged))
            }
            let old = alice.keys.accountDeletion(whisperId: alice.whisperId, timestamp: Clock.millisecondsNow() - 3_600_000)
            await #expect(throws: WhisperClientError.self) { _ = try await alice.connection.request(AccountDelete(sessionToken: alice.token, old)) }
            let others = alice.keys.accountDeletion(whisperId: bob.whisperId)
            await #expect(throws: WhisperClientError.self) { _ = try await alice.connection.request(AccountDelete(sessionToken: alice.token, others)) }

            // The operators banned her once and reviewed a report about her (the rows the
            // admin service writes with those actions).
            try await stack.withPostgres { client in
                let ban = #"{"reason":"spam from \#(alice.whisperId)","expiresAt":"1800000000000"}"#
                let unban = #"{"ban":"1","note":"appealed"}"#
                let review = #"{"decision":"dismissed","reported":"\#(alice.whisperId)","note":"nothing there"}"#
                for (action, target, details) in [("ban", alice.whisperId, ban), ("unban", alice.whisperId, unban), ("report.review", UUID().uuidString, review)] {
                    _ = try await client.query(
                        "INSERT INTO audit_events (actor, action, target, details) VALUES ('operator', \(action), \(target), \(details)::jsonb)",
                        logger: TestServers.logger
                    )
                }
            }

            let scansBefore = try await stack.withRedis { try await Self.scans(on: $0) }
            let deleted = try await alice.connection.deleteAccount(keys: alice.keys)
            #expect(deleted.whisperId == alice.whisperId)
            // Its keys were named, not looked for: the key space was never walked.
            #expect(try await stack.withRedis { try await Self.scans(on: $0) } == scansBefore, "the deletion walked the key space")
            // The socket is told and closed.
            try await waitUntil { await alice.events.all(.sessionRevoked).contains { $0.payload(as: SessionRevoked.self)?.reason == .accountDeleted } }

            // The others were told as for a member leaving; alice's group passed to bob, who joined first.
            try await waitUntil {
                let updates = await bob.events.all(.groupUpdated).compactMap { $0.payload(as: GroupUpdated.self) }
                return updates.contains { $0.groupId == owned.groupId && $0.removed == [alice.whisperId] && $0.ownerId == bob.whisperId }
            }
            try await waitUntil {
                await carol.events.all(.groupUpdated).compactMap { $0.payload(as: GroupUpdated.self) }.contains { $0.groupId == owned.groupId }
            }
            try await waitUntil {
                let changes = await bob.events.all(.pttMembership).compactMap { $0.payload(as: PTTMembership.self) }
                return changes.contains { $0.channelId == ownChannel.channelId && $0.change == .deleted }
                    && changes.contains { $0.channelId == bobsChannel.channelId && $0.change == .left && $0.whisperId == alice.whisperId }
            }
            #expect(try await bob.connection.updateGroup(joined.groupId, title: "still bob's").memberIds == [bob.whisperId])

            // Others see NOT_FOUND: key lookups and messages.
            await #expect(throws: WhisperAPIError.self) { _ = try await api.keys(of: alice.whisperId, sessionToken: bob.token) }
            await #expect(throws: WhisperClientError.refused(.notFound, "no such recipient")) {
                try await bob.connection.send(bob.message("anyone there?", to: alice))
            }
            // Its keys sign in again only as a new identity, under another ID.
            let again = WhisperConnection(url: "ws://127.0.0.1:\(stack.gateways[0].port)/ws", logger: TestServers.logger)
            try await again.connect()
            await #expect(throws: WhisperClientError.self) {
                _ = try await again.register(keys: alice.keys, deviceId: UUID().uuidString.lowercased(), platform: .ios, whisperId: alice.whisperId)
            }
            let fresh = try await again.register(keys: alice.keys, deviceId: UUID().uuidString.lowercased(), platform: .ios)
            #expect(fresh.whisperId != alice.whisperId)
            await again.close()

            // The directory publishes the deletion: the entry's value is its label's tombstone.
            try await waitUntil {
                try await stack.withPostgres { client in
                    try await client.query("SELECT 1 FROM deleted_identities WHERE whisper_id = \(alice.whisperId) AND kt_epoch IS NOT NULL", logger: TestServers.logger)
                        .decode(Int.self).first { _ in true } != nil
                }
            }
            let (label, value) = try await stack.withPostgres { client in
                let rows = try await client.query(
                    """
                    SELECT l.label, n.leaf_value FROM kt_leaves l JOIN kt_nodes n ON n.leaf_label = l.label WHERE l.whisper_id = \(alice.whisperId)
                    """,
                    logger: TestServers.logger
                )
                var found: ([UInt8], [UInt8]) = ([], [])
                for try await (label, value) in rows.decode((ByteBuffer, ByteBuffer).self) {
                    found = (Array(label.readableBytesView), Array(value.readableBytesView))
                }
                return found
            }
            #expect(!label.isEmpty && value == KeyDirectory.tombstone(label: label))
            // The auditor accepts every epoch: the deletion is the entry's one change.
            let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
            _ = try await auditor.follow(api)

            // Postgres, table by table: only these name the ID.
            let allowedColumns: Set<String> = [
                "deleted_identities.whisper_id",  // the ID, never given out again
                "kt_leaves.whisper_id",  // the directory's entry, which now says deleted
            ]
            let named = try await stack.withPostgres { try await Self.columnsNaming(alice.whisperId, on: $0) }
            #expect(Set(named).subtracting(allowedColumns).isEmpty, "left in Postgres: \(named)")
            // The operators' record still says what they did, and no longer to whom or why.
            let audit = try await stack.withPostgres { client in
                var rows: [String] = []
                let result = try await client.query(
                    "SELECT action || ' ' || coalesce(target, '') || ' ' || details::text FROM audit_events WHERE actor = 'operator' ORDER BY id",
                    logger: TestServers.logger
                )
                for try await row in result.decode(String.self) { rows.append(row) }
                return rows
            }
            #expect(audit.count == 3)
            #expect(audit[0].hasPrefix("ban \(AccountDeletion.deletedTarget) ") && audit[0].contains("expiresAt") && !audit[0].contains("spam"))
            #expect(audit[1].hasPrefix("unban \(AccountDeletion.deletedTarget) ") && !audit[1].contains("appealed"))
            #expect(audit[2].contains(#""reported": "\#(AccountDeletion.deletedTarget)""#) && !audit[2].contains("nothing there"))
            // The object store: gc-worker's next run deletes the blob and its rows, and its
            // journal keeps the deletion (the ID and the signed request, sealed) for restores.
            #expect(try await signer.store.head(objectKey) != nil)
            try await GCTests.collector(stack, store: signer.store) { collector in _ = try await collector.run() }
            #expect(try await signer.store.head(objectKey) == nil)
            #expect(try await GCTests.rows(stack, objectKey) == 0)
            _ = try await stack.withPostgres { postgres in
                try await stack.withRedis { redis in
                    try await DeletionJournal(
                        postgres: postgres, redis: redis, store: signer.store, keys: TestServers.journalKeys, instanceID: "gc-test", logger: TestServers.logger
                    ).write()
                }
            }
            // Key by key: no object names the ID, in its name or its content.
            var keys: [String] = [], continuation: String?
            repeat {
                let page = try await signer.store.list(prefix: "", continuation: continuation)
                keys += page.keys
                continuation = page.next
            } while continuation != nil
            var naming: [String] = []
            for key in keys {
                let body = try await signer.store.get(key, limit: 64 << 20) ?? []
                if key.contains(alice.whisperId) || String(decoding: body, as: UTF8.self).contains(alice.whisperId) { naming.append(key) }
            }
            #expect(naming.isEmpty, "left in the object store: \(naming) of \(keys.count) objects")
            // The journal's object for her is named by the key alone and opens, with it, to her own signed request.
            let journalName = TestServers.journalKeys.first.name(of: alice.whisperId)
            #expect(keys.contains(journalName))
            let sealed = try #require(try await signer.store.get(journalName))
            let record = try #require(TestServers.journalKeys.first.open(sealed, name: journalName))
            #expect(record.whisperId == alice.whisperId && record.request?.whisperId == alice.whisperId)

            // Redis, key by key: only what others hold of what alice sent them names her
            // (docs/security.md): bob's and dan's records of the messages they took (kept for
            // duplicate detection with their queues' lifetime) and carol's queue, where one
            // still waits. Not dan's peers: alice wrote to him one way, and her own record of
            // that names him.
            // Carol takes alice's waiting message only now: its receipt is owed to nobody
            // and is not kept (before, it made alice a new receipts stream for 72 hours).
            let carols = await carol.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self) }
            let fromAlice = try #require(carols.first { $0.message.from == alice.whisperId })
            try await carol.connection.acknowledge(fromAlice)
            try await waitUntil {
                try await !stack.withRedis { try await Self.keysNaming(alice.whisperId, on: $0) }.contains(RedisKeys.pending(carol.whisperId))
            }
            let leftovers = try await stack.withRedis { try await Self.keysNaming(alice.whisperId, on: $0) }
            // Beside them, the mark that keeps frames owed to alice from being kept, which
            // lapses with the last message others may hold of hers.
            let mark = RedisKeys.deleted(alice.whisperId)
            let othersHold = ["pending:{\(bob.whisperId)}:msg:", "pending:{\(dan.whisperId)}:msg:", "pending:{\(carol.whisperId)}:msg:", mark]
            #expect(leftovers.allSatisfy { key in othersHold.contains { key.hasPrefix($0) } }, "left in Redis: \(leftovers)")
            let markTTL = try await stack.withRedis { try await $0.send("PTTL", mark).int ?? -2 }
            #expect(markTTL > 0 && markTTL <= Int64(PendingQueue.ttl.milliseconds), "the mark lapses with the queues")
            #expect(!leftovers.isEmpty, "bob's records of alice's messages are what the check lists; none found means it looked at nothing")
        }
    }

    @Test func theHTTPTwinDeletesTooAndAnswersOnceItIsDone() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let dave = try await stack.user(on: 1), erin = try await stack.user(on: 0)
            try await stack.makePeers([dave, erin])
            let group = try await erin.connection.createGroup(title: "erin's", memberIds: [dave.whisperId])
            let websocket = "ws://127.0.0.1:\(stack.gateways[1].port)/ws"
            let auth = stack.auth.baseURL
            let api = WhisperAPI(endpoints: WhisperEndpoints(websocket: websocket, auth: auth, attachments: auth, turn: auth), directory: DirectoryView())
            // Signed by the wrong key: 401, nothing deleted.
            let stranger = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            await #expect(throws: WhisperAPIError.self) { try await api.deleteAccount(whisperId: dave.whisperId, keys: stranger, sessionToken: dave.token) }
            #expect(try await stack.withPostgres { client in
                try await client.query("SELECT 1 FROM users WHERE whisper_id = \(dave.whisperId)", logger: TestServers.logger).decode(Int.self).first { _ in true }
            } == 1)

            let deleted = try await api.deleteAccount(whisperId: dave.whisperId, keys: dave.keys, sessionToken: dave.token)
            #expect(deleted.whisperId == dave.whisperId)
            try await waitUntil { await dave.events.all(.sessionRevoked).contains { $0.payload(as: SessionRevoked.self)?.reason == .accountDeleted } }
            try await waitUntil {
                await erin.events.all(.groupUpdated).compactMap { $0.payload(as: GroupUpdated.self) }
                    .contains { $0.groupId == group.groupId && $0.removed == [dave.whisperId] }
            }
            // The session went with it.
            do {
                try await api.deleteAccount(whisperId: dave.whisperId, keys: dave.keys, sessionToken: dave.token)
                Issue.record("a deleted identity's session still worked")
            } catch WhisperAPIError.refused(let status, _, _) {
                #expect(status == 401)
            }
        }
    }

    /// Deletions cost their address and their identity a token each before anything is
    /// checked: an identity's unsigned attempts run out, and an address that churns
    /// identities cannot delete past its share, over the frame or over HTTP.
    @Test func deletionsAreLimitedPerAddressAndPerIdentity() async throws {
        try await MessagingStack.start(routers: 1, gateway: { settings in
            settings.limits[.deletionsPerAddress] = RateLimitRule("4/1h")!
            settings.limits[.deletionsPerIdentity] = RateLimitRule("2/1h")!
        }).running { stack in
            let erin = try await stack.user(on: 0), frank = try await stack.user(on: 1), gina = try await stack.user(on: 0)
            let forger = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            for _ in 0..<2 {
                await #expect(throws: WhisperClientError.refused(.authFailed, "signature does not verify with the identity's signing key")) {
                    _ = try await erin.connection.request(AccountDelete(sessionToken: erin.token, forger.accountDeletion(whisperId: erin.whisperId)))
                }
            }
            // Her own signature comes too late: the identity's attempts are used up.
            await #expect(performing: { _ = try await erin.connection.deleteAccount(keys: erin.keys) }, throws: { refusal in
                if case .refused(.rateLimited, let message) = refusal as? WhisperClientError { message.hasPrefix("too many account deletion attempts") } else { false }
            })
            // The address has had three; frank's is its fourth and last.
            #expect(try await frank.connection.deleteAccount(keys: frank.keys).whisperId == frank.whisperId)
            let refusedForAddress: @Sendable (any Error) -> Bool = { refusal in
                switch refusal {
                case WhisperClientError.refused(.rateLimited, let message): message.hasPrefix("too many account deletions from this address")
                case WhisperAPIError.retryLater(let status, _): status == 429
                default: false
                }
            }
            await #expect(performing: { _ = try await gina.connection.deleteAccount(keys: gina.keys) }, throws: refusedForAddress)
            let auth = stack.auth.baseURL, websocket = "ws://127.0.0.1:\(stack.gateways[0].port)/ws"
            let api = WhisperAPI(endpoints: WhisperEndpoints(websocket: websocket, auth: auth, attachments: auth, turn: auth), directory: DirectoryView())
            await #expect(performing: { _ = try await api.deleteAccount(whisperId: gina.whisperId, keys: gina.keys, sessionToken: gina.token) }, throws: refusedForAddress)
            let remaining = try await stack.withPostgres { client in
                var ids: [String] = []
                let rows = try await client.query(
                    "SELECT whisper_id FROM users WHERE whisper_id = ANY(\([erin.whisperId, frank.whisperId, gina.whisperId])::text[]) ORDER BY whisper_id",
                    logger: TestServers.logger
                )
                for try await id in rows.decode(String.self) { ids.append(id) }
                return ids
            }
            #expect(remaining == [erin.whisperId, gina.whisperId].sorted())
        }
    }

    /// `table.column` of every text, JSON or array column of the schema with a value that
    /// holds `text`.
    static func columnsNaming(_ text: String, on client: PostgresClient) async throws -> [String] {
        var columns: [(String, String)] = []
        let rows = try await client.query(
            """
            SELECT table_name::text, column_name::text FROM information_schema.columns
            WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'jsonb', 'json', 'ARRAY')
            """,
            logger: TestServers.logger
        )
        for try await column in rows.decode((String, String).self) { columns.append(column) }
        var naming: [String] = []
        for (table, column) in columns {
            let query = PostgresQuery(unsafeSQL: "SELECT count(*) FROM \"\(table)\" WHERE \"\(column)\"::text LIKE '%' || $1 || '%'", binds: {
                var binds = PostgresBindings()
                binds.append(text)
                return binds
            }())
            let count = try await client.query(query, logger: TestServers.logger).decode(Int64.self).first { _ in true } ?? 0
            if count > 0 { naming.append("\(table).\(column)") }
        }
        return naming
    }

    /// How many `SCAN`s (and slot listings) the server has answered.
    static func scans(on redis: RedisClient) async throws -> Int {
        let stats = try await redis.send("INFO", "commandstats").string ?? ""
        return stats.split(whereSeparator: \.isNewline).reduce(0) { total, line in
            guard line.hasPrefix("cmdstat_scan:") || line.hasPrefix("cmdstat_cluster|getkeysinslot:"),
                  let calls = line.split(separator: ":").last?.split(separator: ",").first(where: { $0.hasPrefix("calls=") }) else { return total }
            return total + (Int(calls.dropFirst("calls=".count)) ?? 0)
        }
    }

    /// Every key whose name or value holds `text`.
    static func keysNaming(_ text: String, on redis: RedisClient) async throws -> [String] {
        var naming: [String] = []
        var keys: [String] = []
        try await redis.scan(matching: "*") { keys += $0 }
        for key in keys {
            if key.contains(text) {
                naming.append(key)
                continue
            }
            let type = try await redis.send("TYPE", key).string ?? "none"
            let value: RESPValue = switch type {
            case "string": try await redis.send("GET", key)
            case "hash": try await redis.send("HGETALL", key)
            case "list": try await redis.send("LRANGE", key, 0, -1)
            case "set": try await redis.send("SMEMBERS", key)
            case "zset": try await redis.send("ZRANGE", key, 0, -1)
            case "stream": try await redis.send("XRANGE", key, "-", "+")
            default: .null
            }
            if "\(value)".contains(text) || Self.strings(value).contains(where: { $0.contains(text) }) { naming.append(key) }
        }
        return naming
    }

    private static func strings(_ value: RESPValue) -> [String] {
        if let array = value.array { return array.flatMap(strings) }
        return value.string.map { [$0] } ?? []
    }
}
