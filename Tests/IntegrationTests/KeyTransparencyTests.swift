import AsyncHTTPClient
import Foundation
import Hummingbird
import PostgresNIO
import Synchronization
import Testing
import WhisperClient
import WhisperProtocol
import WhisperShared

/// The key directory from outside: lookups are proven, the owner checks its own entry,
/// the auditor checks every epoch, and each way a server could swap keys unseen (a
/// rewritten key row, a split view, a rollback, a doctored proof) is caught by the
/// SDK's checks, the owner's monitor or the auditor.
@Suite(.serialized, .stopsSessions) struct KeyTransparencyTests {
    static func api(_ stack: MessagingStack, directory: DirectoryView = DirectoryView()) -> WhisperAPI {
        let auth = stack.auth.baseURL
        return WhisperAPI(endpoints: WhisperEndpoints(websocket: "ws://unused/ws", auth: auth, attachments: auth, turn: auth), directory: directory)
    }

    /// The newest published epoch.
    static func epoch(_ stack: MessagingStack) async throws -> Int64 {
        try await stack.withPostgres { client in
            try await client.query("SELECT coalesce(max(epoch), 0) FROM kt_epochs", logger: TestServers.logger).decode(Int64.self).first { _ in true } ?? 0
        }
    }

    /// Waits until an epoch has published every identity registered so far.
    static func waitForPublication(_ stack: MessagingStack) async throws {
        try await stack.withPostgres { client in
            try await waitUntil {
                try await client.query("SELECT count(*) FROM users WHERE kt_epoch IS NULL", logger: TestServers.logger).decode(Int64.self).first { _ in true } == 0
            }
        }
    }

    @Test func aLookupIsProvenTheOwnerFindsItsOwnKeysAndTheAuditorEveryEpoch() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let api = Self.api(stack)
            // Bob is looked up right after registering: the lookup waits for his epoch.
            let lookup = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            #expect(lookup.keys == bob.peerKeys)
            #expect(await api.directory.head == lookup.head)
            #expect(try await api.directoryKeys() == TestServers.directorySigner.publicKeys)
            try await api.checkOwnEntry(whisperId: alice.whisperId, keys: alice.keys, sessionToken: alice.token)
            // Another client that holds an older head is given the log's growth and checks it.
            let carol = try await stack.user(on: 0)
            try await Self.waitForPublication(stack)
            let again = try await api.keys(of: carol.whisperId, sessionToken: alice.token)
            #expect(again.head.epoch > lookup.head.epoch, "carol's epoch came after bob's")

            // The auditor checks every epoch from the first, and only new ones after that.
            let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
            let checked = try await auditor.follow(api)
            #expect(checked == Int(try await Self.epoch(stack)))
            #expect(await auditor.added == 3)
            #expect(await auditor.head?.epoch == again.head.epoch)
            #expect(try await auditor.follow(api) == 0)
        }
    }

    @Test func aKeyRowRewrittenInPostgresIsCaughtByTheLookupTheOwnerAndTheAuditor() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let api = Self.api(stack)
            _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
            _ = try await auditor.follow(api)

            // An attacker with the database gives bob a key of its own.
            let mallory = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            try await stack.withPostgres { client in
                _ = try await client.query(
                    "UPDATE users SET enc_public_key = \(ByteBuffer(bytes: mallory.encPublicKey)) WHERE whisper_id = \(bob.whisperId)", logger: TestServers.logger
                )
            }
            // The served key does not open bob's commitment: alice's lookup fails, bob's monitor too.
            await #expect(throws: KeyTransparencyError.badInclusionProof) { _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token) }
            await #expect(throws: KeyTransparencyError.keysNotMine) {
                try await Self.api(stack).checkOwnEntry(whisperId: bob.whisperId, keys: bob.keys, sessionToken: bob.token)
            }

            // The attacker also has the directory publish the new key: the lookup now passes,
            // but bob's monitor sees keys that are not his, and the auditor, with no help
            // from bob, an entry changed to something other than its tombstone.
            try await stack.withPostgres { client in
                _ = try await client.query("UPDATE users SET kt_epoch = NULL WHERE whisper_id = \(bob.whisperId)", logger: TestServers.logger)
            }
            try await Self.waitForPublication(stack)
            // Alice's client proved bob's keys before: other keys for him, even with a valid
            // proof, are refused. A client that never looked bob up takes them.
            await #expect(throws: KeyTransparencyError.peerKeysChanged(whisperId: bob.whisperId)) {
                _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            }
            let swapped = try await Self.api(stack).keys(of: bob.whisperId, sessionToken: alice.token)
            #expect(swapped.keys.encPublicKey == mallory.encPublicKey)
            // What alice's client keeps between runs keeps refusing them after a restart.
            let restarted = Self.api(stack, directory: DirectoryView(keys: try await api.directoryKeys(), provenKeys: await api.directory.provenKeys))
            await #expect(throws: KeyTransparencyError.peerKeysChanged(whisperId: bob.whisperId)) {
                _ = try await restarted.keys(of: bob.whisperId, sessionToken: alice.token)
            }
            await #expect(throws: KeyTransparencyError.keysNotMine) {
                try await Self.api(stack).checkOwnEntry(whisperId: bob.whisperId, keys: bob.keys, sessionToken: bob.token)
            }
            try await Self.expectFinding(stack, auditor, api, epoch: swapped.head.epoch, about: bob.whisperId)
        }
    }

    /// A third-party auditor's signatures: taken from a configured auditor's key alone, of a
    /// head the directory published and signed about now, the auditor's newest kept, and
    /// served beside the head for clients to require.
    @Test func anAuditorsSignatureIsTakenFromItsKeyAloneAndServedBesideTheHead() async throws {
        let auditorKey = Ed25519.KeyPair(seed: SecureBytes.random(32))
        // A second auditor runs `whisper-audit --serve` with a key file of its own.
        let seed = SecureBytes.random(32), keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("auditor-\(UUID().uuidString).key")
        try Data((Data(seed).base64EncodedString() + "\n").utf8).write(to: keyFile)
        defer { try? FileManager.default.removeItem(at: keyFile) }
        let servingKey = Ed25519.KeyPair(seed: seed)
        try await MessagingStack.start(routers: 1, auth: { $0.auditorKeys = [auditorKey.publicKey, servingKey.publicKey] }).running { stack in
            _ = try await stack.user(on: 0)
            try await Self.waitForPublication(stack)
            let api = Self.api(stack)
            let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
            _ = try await auditor.follow(api)
            let head = try #require(await auditor.head)
            #expect(try await api.audits().audits.isEmpty)

            // The auditor's word on the head it verified is kept and served.
            let audit = AuditorSignature(signing: head, with: auditorKey)
            #expect(try await api.submit(audit))
            let served = try await api.audits().audits
            #expect(served == [AuditedHead(head: head, audit: audit)])
            #expect(served.first?.audit.isSigned(by: auditorKey.publicKey) == true && served.first?.audit.isOf(head) == true)
            // An older word of the same auditor is not kept.
            #expect(try await !api.submit(AuditorSignature(signing: head, with: auditorKey, at: audit.signedAt - 1_000)))
            #expect(try await api.audits().audits.map(\.audit) == [audit])

            func refusal(_ audit: AuditorSignature) async -> Int? {
                do {
                    _ = try await api.submit(audit)
                    return nil
                } catch WhisperAPIError.refused(let status, _, _) {
                    return status
                } catch {
                    return -1
                }
            }
            // Another key than a configured auditor's: 403, whoever signed.
            #expect(await refusal(AuditorSignature(signing: head, with: Ed25519.KeyPair(seed: SecureBytes.random(32)))) == 403)
            // A log root the directory never published for the epoch, or a signature of
            // another time than it says, or long ago: refused.
            var otherLog = head
            otherLog.logRoot = Data(repeating: 9, count: 32).base64EncodedString()
            #expect(await refusal(AuditorSignature(signing: otherLog, with: auditorKey)) == 400)
            var tampered = AuditorSignature(signing: head, with: auditorKey)
            tampered.signedAt += 1
            #expect(await refusal(tampered) == 401)
            #expect(await refusal(AuditorSignature(signing: head, with: auditorKey, at: Clock.millisecondsNow() - 3_600_000)) == 400)
            #expect(try await api.audits().audits.map(\.audit) == [audit])

            // `whisper-audit --serve`: prints the public key to give the operator, then
            // follows, verifies and delivers its own signature of the newest head.
            let (status, printed) = try Self.audit(stack, "--auditor-key", keyFile.path, "--print-public-key")
            #expect(status == 0 && printed.trimmingCharacters(in: .whitespacesAndNewlines) == Data(servingKey.publicKey).base64EncodedString())
            let serving = Process()
            serving.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/whisper-audit")
            serving.arguments = ["--server", stack.auth.baseURL, "--serve", "--auditor-key", keyFile.path, "--interval", "1"]
            serving.standardOutput = FileHandle.nullDevice
            serving.standardError = FileHandle.nullDevice
            try serving.run()
            defer { serving.terminate() }
            try await waitUntil(timeout: .seconds(30)) {
                try await api.audits().audits.contains { $0.audit.auditorKeyId == Ed25519.keyId(servingKey.publicKey) && $0.audit.isSigned(by: servingKey.publicKey) }
            }
            #expect(serving.isRunning, "the auditor keeps following")
        }
    }

    /// A client that requires an auditor takes a head only when one of its auditors signed
    /// a head on its log published at most the maximum lag before it: none signed yet is
    /// `notAudited`, in a lookup and as the session's alert; once the auditor signed, the
    /// lookup passes; a head newer than the audited one by more than a client's lag is
    /// `notAudited` for that client.
    @Test func aHeadNoAuditorSignedIsNotAuditedWhereAnAuditorIsRequired() async throws {
        let auditorKey = Ed25519.KeyPair(seed: SecureBytes.random(32))
        try await MessagingStack.start(routers: 1, auth: { $0.auditorKeys = [auditorKey.publicKey] }).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            try await Self.waitForPublication(stack)
            let requiring = Self.api(stack, directory: DirectoryView(auditorKeys: [auditorKey.publicKey]))
            await #expect(throws: KeyTransparencyError.notAudited) { _ = try await requiring.keys(of: bob.whisperId, sessionToken: alice.token) }

            // An app's session shows it as an alert (its own entry's check).
            var configuration = WhisperSession.Configuration(gateways: [stack.websocketURL(0)], deviceId: RandomID.uuid(), platform: .ios)
            configuration.backoff = .init(initial: .milliseconds(100), maximum: .seconds(2))
            let auth = stack.auth.baseURL
            let sessionAPI = WhisperAPI(
                endpoints: WhisperEndpoints(websocket: stack.websocketURL(0), auth: auth, attachments: auth, turn: auth),
                directory: DirectoryView(auditorKeys: [auditorKey.publicKey])
            )
            let session = TestSessions.track(WhisperSession(
                configuration: configuration, keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), credentials: nil, api: sessionAPI,
                logger: TestServers.logger
            ))
            let alerts = Mutex<[KeyTransparencyError]>([])
            let watching = Task {
                for await event in session.events {
                    if case .directoryAlert(let problem) = event { alerts.withLock { $0.append(problem) } }
                }
            }
            defer { watching.cancel() }
            await session.start()
            try await waitUntil(timeout: .seconds(20)) { alerts.withLock { $0.contains(.notAudited) } }
            await session.stop()

            // The auditor follows the directory and signs: the same lookup passes.
            let auditor = DirectoryAuditor(keys: try await requiring.directoryKeys())
            _ = try await auditor.follow(requiring)
            try await requiring.submit(AuditorSignature(signing: try #require(await auditor.head), with: auditorKey))
            #expect(try await requiring.keys(of: bob.whisperId, sessionToken: alice.token).keys.signPublicKey == bob.keys.signPublicKey)

            // A newer epoch: a client that allows no lag behind the audited head refuses it.
            _ = try await stack.user(on: 0)
            try await Self.waitForPublication(stack)
            let strict = Self.api(stack, directory: DirectoryView(auditorKeys: [auditorKey.publicKey], maxAuditLag: .zero))
            await #expect(throws: KeyTransparencyError.notAudited) { _ = try await strict.keys(of: bob.whisperId, sessionToken: alice.token) }
            #expect(try await requiring.keys(of: bob.whisperId, sessionToken: alice.token).keys.signPublicKey == bob.keys.signPublicKey)
        }
    }

    /// After a real deletion nobody watches the entry: its tombstone is the one value it
    /// may ever take again, so a key committed over it is the auditor's finding.
    @Test func aKeyCommittedOverADeletedEntryIsTheAuditorsFinding() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let api = Self.api(stack)
            _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            _ = try await bob.connection.deleteAccount(keys: bob.keys)
            let label = try await stack.withPostgres { client in
                try await waitUntil {
                    try await client.query("SELECT 1 FROM deleted_identities WHERE whisper_id = \(bob.whisperId) AND kt_epoch IS NOT NULL", logger: TestServers.logger)
                        .decode(Int.self).first { _ in true } != nil
                }
                return try await Self.label(of: bob.whisperId, on: client)
            }
            // The deletion is the entry's tombstone, which the auditor recomputes and accepts.
            let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
            _ = try await auditor.follow(api)
            #expect(await auditor.deleted == 1)
            let leaf = try await stack.withPostgres { client in
                try await client.query("SELECT leaf_value FROM kt_nodes WHERE leaf_label = \(ByteBuffer(bytes: label))", logger: TestServers.logger)
                    .decode(ByteBuffer.self).first { _ in true }.map { Array($0.readableBytesView) }
            }
            #expect(leaf == KeyDirectory.tombstone(label: label))

            // The operator brings bob back with keys of its own, and the directory commits them.
            let mallory = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
            try await stack.withPostgres { client in
                _ = try await client.query(
                    """
                    INSERT INTO users (whisper_id, enc_public_key, sign_public_key)
                    VALUES (\(bob.whisperId), \(ByteBuffer(bytes: mallory.encPublicKey)), \(ByteBuffer(bytes: mallory.signPublicKey)))
                    """,
                    logger: TestServers.logger
                )
            }
            try await Self.waitForPublication(stack)
            // Alice's client, which proved bob's keys before, refuses them; a new client is
            // served them with a valid proof.
            await #expect(throws: KeyTransparencyError.peerKeysChanged(whisperId: bob.whisperId)) {
                _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            }
            let forged = try await Self.api(stack).keys(of: bob.whisperId, sessionToken: alice.token)
            #expect(forged.keys.signPublicKey == mallory.signPublicKey, "a client is served the forged keys with a valid proof")
            try await Self.expectFinding(stack, auditor, api, epoch: forged.head.epoch, about: bob.whisperId)
        }
    }

    /// A directory that stops publishing keeps every client on its last head: past the
    /// bound, that head is refused as stale by the SDK and reported by whisper-audit.
    @Test func aHeadPastItsAgeIsStale() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let bound = Duration.seconds(2)
            let api = Self.api(stack, directory: DirectoryView(maxHeadAge: bound))
            let fresh = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            // Nothing changes, so nothing is published (the heartbeat epoch is an hour away).
            try await waitUntil { Clock.millisecondsNow() - fresh.head.publishedAt > Int64(bound.milliseconds) + 200 }
            await #expect(throws: KeyTransparencyError.staleHead(epoch: fresh.head.epoch, publishedAt: fresh.head.publishedAt)) {
                _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            }
            let (status, printed) = try Self.audit(stack, "--max-head-age", "2")
            #expect(status == 1 && printed.contains("STALE: the newest head, epoch \(fresh.head.epoch),"), "whisper-audit printed: \(printed)")
        }
    }

    /// Lookups are authenticated, so the server could hide the owner's entry from the
    /// owner alone ("waiting", or 404) while serving others a key of its own: once the
    /// entry was proven, the session's monitor tells the app.
    @Test func theOwnersEntryHiddenFromItsSessionIsAnAlert() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            func watched() async throws -> (WhisperSession, WhisperSessionTests.Watcher, WhisperAPI, String) {
                var configuration = WhisperSession.Configuration(gateways: [stack.websocketURL(0)], deviceId: RandomID.uuid(), platform: .ios)
                configuration.monitorInterval = .milliseconds(500)
                var api = Self.api(stack)
                api.directoryWait = .seconds(1)
                let session = TestSessions.track(WhisperSession(
                    configuration: configuration, keys: try WhisperKeys(mnemonic: BIP39.generateMnemonic()), credentials: nil, api: api, logger: TestServers.logger
                ))
                let watcher = WhisperSessionTests.Watcher(session)
                await session.start()
                // Proven once: the monitor's lookup held a head.
                try await waitUntil(timeout: .seconds(20)) { await api.directory.head != nil }
                return (session, watcher, api, try #require(await session.credentials?.whisperId))
            }
            let (alice, aliceWatch, _, aliceId) = try await watched()
            defer { aliceWatch.cancel() }
            let (bob, bobWatch, _, bobId) = try await watched()
            defer { bobWatch.cancel() }
            #expect(aliceWatch.alerts.withLock { $0 }.isEmpty && bobWatch.alerts.withLock { $0 }.isEmpty)

            // Alice's entry answered as waiting for an epoch (its label taken away), Bob's as 404.
            try await stack.withPostgres { client in
                _ = try await client.query("DELETE FROM kt_leaves WHERE whisper_id = \(aliceId)", logger: TestServers.logger)
                _ = try await client.query("DELETE FROM users WHERE whisper_id = \(bobId)", logger: TestServers.logger)
            }
            // Within a check's interval and the lookup's wait.
            try await waitUntil(timeout: .seconds(10)) { aliceWatch.alerts.withLock { $0.contains(.ownEntryHidden) } }
            try await waitUntil(timeout: .seconds(10)) { bobWatch.alerts.withLock { $0.contains(.ownEntryHidden) } }
            // Once, not at every check (Alice's monitor checked again while Bob's alert came).
            #expect(aliceWatch.alerts.withLock { $0.filter { $0 == .ownEntryHidden }.count } == 1)
            await alice.stop()
            await bob.stop()
        }
    }

    /// Whoever can write the server's database can list a signing key of its own in
    /// `kt_keys` and sign heads with it: a client that holds the directory's keys takes a
    /// new one only through a statement a held key signed, so that head is refused.
    @Test func aSigningKeyAddedInPostgresAloneIsRefused() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let api = Self.api(stack)
            _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            let mallory = Ed25519.KeyPair(seed: SecureBytes.random(32))
            try await stack.withPostgres { client in
                _ = try await client.query(
                    """
                    INSERT INTO kt_keys (purpose, position, key_id, public_key)
                    VALUES ('signing', 7, \(Ed25519.keyId(mallory.publicKey)), \(ByteBuffer(bytes: mallory.publicKey)))
                    """,
                    logger: TestServers.logger
                )
                _ = try await Self.signNewestHeadAgain(with: mallory, on: client)
            }
            let listed = try await stack.withPostgres { try await DirectoryStore(postgres: $0, logger: TestServers.logger).keys() }
            #expect(listed?.signingKey(Ed25519.keyId(mallory.publicKey)) != nil, "the key is listed")
            await #expect(throws: KeyTransparencyError.badHeadSignature) { _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token) }
            #expect(await api.directory.keys?.signingKey(Ed25519.keyId(mallory.publicKey)) == nil)
        }
    }

    /// The operator's rotation (add the new key last, move it first, drop the old one):
    /// a client that pinned the old key follows it through the old key's endorsement,
    /// and once the old key is dropped it is retired, so a head it signs later, by
    /// whoever kept it, is refused.
    @Test func aRotationIsFollowedThroughItsEndorsementAndARetiredKeySignsNothingMore() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let api = Self.api(stack, directory: DirectoryView(keys: TestServers.directorySigner.publicKeys, keysRefreshInterval: .zero))
            _ = try await api.keys(of: bob.whisperId, sessionToken: alice.token)
            try await stack.directory.stop()
            let old = TestServers.directorySigningSeed, new = SecureBytes.random(32)
            let newId = Ed25519.keyId(Ed25519.KeyPair(seed: new).publicKey)
            @Sendable func publisher(_ seeds: [[UInt8]], _ client: PostgresClient) -> DirectoryPublisher {
                DirectoryPublisher(
                    postgres: client, signer: DirectorySigner(vrfSeed: TestServers.directoryVRFSeed, signingSeeds: seeds), batchSize: 100,
                    headMaxAge: .seconds(3_600), logger: TestServers.logger
                )
            }
            let carol = try await stack.user(on: 0)
            try await stack.withPostgres { client in
                try await publisher([old, new], client).recordKeys()
                try await publisher([new, old], client).recordKeys()
                #expect(try await publisher([new, old], client).publish()?.head.keyId == newId)
            }
            let signedByNew = try await api.keys(of: carol.whisperId, sessionToken: alice.token)
            #expect(signedByNew.head.keyId == newId, "followed through the old key's endorsement")

            // The old key is dropped: retired from now on.
            let dave = try await stack.user(on: 1)
            let retiredAt = Clock.millisecondsNow()
            try await stack.withPostgres { client in
                try await publisher([new], client).recordKeys()
                try await waitUntil { Clock.millisecondsNow() > retiredAt + 1 }
                _ = try await publisher([new], client).publish()
                _ = try await Self.signNewestHeadAgain(with: Ed25519.KeyPair(seed: old), on: client)
            }
            await #expect(throws: KeyTransparencyError.badHeadSignature) { _ = try await api.keys(of: dave.whisperId, sessionToken: alice.token) }
            #expect(await api.directory.keys?.retiredAt(Ed25519.keyId(Ed25519.KeyPair(seed: old).publicKey)) != nil)
        }
    }

    /// Signs the newest epoch's head again with `pair` (as someone holding that key and the
    /// database would); returns the epoch.
    static func signNewestHeadAgain(with pair: Ed25519.KeyPair, on client: PostgresClient) async throws -> Int64 {
        let rows = try await client.query(
            "SELECT epoch, log_root, prefix_root, published_at FROM kt_epochs ORDER BY epoch DESC LIMIT 1", logger: TestServers.logger
        )
        var newest: (Int64, [UInt8], [UInt8], Int64)?
        for try await (epoch, log, prefix, at) in rows.decode((Int64, ByteBuffer, ByteBuffer, Int64).self) {
            newest = (epoch, Array(log.readableBytesView), Array(prefix.readableBytesView), at)
        }
        let (epoch, logRoot, prefixRoot, publishedAt) = try #require(newest)
        let signature = pair.sign(DirectoryHead.signedBytes(epoch: epoch, logRoot: logRoot, prefixRoot: prefixRoot, publishedAt: publishedAt))
        _ = try await client.query(
            "UPDATE kt_epochs SET key_id = \(Ed25519.keyId(pair.publicKey)), signature = \(ByteBuffer(bytes: signature)) WHERE epoch = \(epoch)",
            logger: TestServers.logger
        )
        return epoch
    }

    /// Runs `whisper-audit` against the stack's auth; its exit status and what it printed.
    static func audit(_ stack: MessagingStack, _ arguments: String...) throws -> (Int32, String) {
        try audit(["--server", stack.auth.baseURL] + arguments)
    }

    /// Runs `whisper-audit` with `arguments`; its exit status and what it printed.
    static func audit(_ arguments: [String]) throws -> (Int32, String) {
        let audit = Process()
        audit.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/whisper-audit")
        audit.arguments = arguments
        let output = Pipe()
        audit.standardOutput = output
        audit.standardError = FileHandle.nullDevice
        try audit.run()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        audit.waitUntilExit()
        return (audit.terminationStatus, printed)
    }

    /// The entry's label as the directory stores it.
    static func label(of whisperId: String, on client: PostgresClient) async throws -> [UInt8] {
        let label = try await client.query("SELECT label FROM kt_leaves WHERE whisper_id = \(whisperId)", logger: TestServers.logger)
            .decode(ByteBuffer.self).first { _ in true }
        return Array(try #require(label).readableBytesView)
    }

    /// The auditor in this process and `whisper-audit` from the start both find epoch
    /// `epoch` wrong, naming `whisperId`'s entry by its label.
    static func expectFinding(_ stack: MessagingStack, _ auditor: DirectoryAuditor, _ api: WhisperAPI, epoch: Int64, about whisperId: String) async throws {
        let label = Data(try await stack.withPostgres { try await Self.label(of: whisperId, on: $0) }).base64EncodedString()
        do {
            _ = try await auditor.follow(api)
            Issue.record("the auditor passed epoch \(epoch)")
        } catch let finding as DirectoryAuditor.Finding {
            #expect(finding.epoch == epoch)
            #expect(finding.label == label)
        }
        let (status, printed) = try Self.audit(stack)
        #expect(status == 1, "whisper-audit printed: \(printed)")
        #expect(printed.contains("FAILED: epoch \(epoch):") && printed.contains(label), "whisper-audit printed: \(printed)")
    }

    @Test func aHeadRolledBackIsRefusedAndTwoHeadsForOneEpochAreCaughtWhenComparedAlsoInMessages() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let aliceAPI = Self.api(stack)
            _ = try await aliceAPI.keys(of: bob.whisperId, sessionToken: alice.token)
            // What the server answered for bob at this epoch, kept to be replayed later.
            let older = try await HTTP.json(.GET, "\(stack.auth.baseURL)/users/\(bob.whisperId)/keys", token: alice.token).json
            let carol = try await stack.user(on: 0)
            try await Self.waitForPublication(stack)
            let newest = try await aliceAPI.keys(of: carol.whisperId, sessionToken: alice.token).head

            // A server rolled back answers with its older state: alice's client refuses it.
            let replay = try JSONSerialization.data(withJSONObject: older)
            let router = Router()
            router.get("/users/\(bob.whisperId)/keys") { _, _ -> Response in
                Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(data: replay)))
            }
            try await RunningService.serving(router).running { server in
                let base = server.baseURL
                let rolledBack = WhisperAPI(
                    endpoints: WhisperEndpoints(websocket: "ws://unused/ws", auth: base, attachments: base, turn: base), directory: aliceAPI.directory
                )
                do {
                    _ = try await rolledBack.keys(of: bob.whisperId, sessionToken: alice.token)
                    Issue.record("a rolled-back head was accepted")
                } catch KeyTransparencyError.rollback(let held, let offered) {
                    #expect(held == newest.epoch && offered < newest.epoch)
                }
            }

            // The server forks: the newest epoch is taken back and published again with other
            // content (dave's entry), signed by the directory's own key. The publisher is held
            // off (its lock) until dave waits and the epoch is gone.
            let daveId = try await stack.withPostgres { client in
                try await client.withTransaction(logger: TestServers.logger) { lock in
                    _ = try await lock.query("SELECT pg_advisory_xact_lock(\(Int64(0x5753_4B54)))", logger: TestServers.logger)
                    let daveId = try await stack.user(on: 1).whisperId
                    let epoch = newest.epoch, index = Int64(newest.epoch - 1)
                    _ = try await client.query("DELETE FROM kt_epochs WHERE epoch >= \(epoch)", logger: TestServers.logger)
                    // Every stored log subtree whose leaves reach the taken-back epoch.
                    _ = try await client.query("DELETE FROM kt_log WHERE ((index + 1) << level) - 1 >= \(index)", logger: TestServers.logger)
                    return daveId
                }
            }
            try await Self.waitForPublication(stack)
            // Bob, a new client, is shown the fork: same epoch number, another head.
            let bobAPI = Self.api(stack)
            let forked = try await bobAPI.keys(of: daveId, sessionToken: bob.token).head
            #expect(forked.epoch == newest.epoch && forked.prefixRoot != newest.prefixRoot)
            // Alice's next lookup is refused (it does not extend her head) ...
            await #expect(throws: KeyTransparencyError.notAnExtension(held: newest.epoch, offered: forked.epoch)) {
                _ = try await aliceAPI.keys(of: bob.whisperId, sessionToken: alice.token)
            }
            // ... and when the two compare heads, each side catches the split.
            await #expect(throws: KeyTransparencyError.notAnExtension(held: newest.epoch, offered: forked.epoch)) {
                try await aliceAPI.compareHead(forked)
            }
            await #expect(throws: KeyTransparencyError.self) { try await bobAPI.compareHead(newest) }
            // The people talking catch it too: bob's message carries the head he holds,
            // under his signature, and alice compares it with hers.
            let held = try #require(await bobAPI.directory.head)
            let sent = MessageCrypto.makeMessage(
                Array("which log do you see?".utf8), from: (bob.whisperId, bob.keys), to: alice.peerKeys, sessionToken: bob.token, directoryHead: held
            )
            try await bob.connection.send(sent)
            var arrived: MessageReceived?
            try await waitUntil {
                arrived = await alice.events.all(.messageReceived).compactMap { $0.payload(as: MessageReceived.self) }.first { $0.messageId == sent.messageId }
                return arrived != nil
            }
            let received = try #require(arrived)
            #expect(received.directoryHead == held)
            #expect(try MessageCrypto.open(received, by: (alice.whisperId, alice.keys), sender: bob.peerKeys) == Array("which log do you see?".utf8))
            await #expect(throws: KeyTransparencyError.notAnExtension(held: newest.epoch, offered: forked.epoch)) {
                try await aliceAPI.compareHead(try #require(received.directoryHead))
            }
            // A server that swaps the head for one alice would accept, or strips it, breaks bob's signature.
            for other in [newest, nil] as [DirectoryHead?] {
                var changed = received
                changed.message.directoryHead = other
                #expect(throws: MessageCryptoError.badSignature) { try MessageCrypto.open(changed, by: (alice.whisperId, alice.keys), sender: bob.peerKeys) }
            }
            // A head the directory did not sign is refused outright.
            var unsigned = forked
            unsigned.publishedAt += 1
            await #expect(throws: KeyTransparencyError.badHeadSignature) { try await bobAPI.compareHead(unsigned) }
        }
    }

    /// Two lookups of one client cross an epoch: the one answered first moves the held
    /// head on, the other's answer (proven in the epoch before) comes later. It is checked
    /// against the head it was asked with and then found on the same log, not taken for
    /// a rollback; a head really rolled back is still refused (the test above).
    @Test func lookupsThatCrossAnEpochAreNotTakenForARollback() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            let aliceAPI = Self.api(stack)
            let first = try await aliceAPI.keys(of: bob.whisperId, sessionToken: alice.token)
            // A path to auth that fetches bob's keys at once but answers only when released.
            let fetched = AsyncStream.makeStream(of: Void.self), released = AsyncStream.makeStream(of: Void.self)
            let auth = stack.auth.baseURL
            @Sendable func forward(_ request: Request) async throws -> ByteBuffer {
                var forwarded = HTTPClientRequest(url: auth + request.uri.description)
                forwarded.headers.add(name: "Authorization", value: request.headers[.authorization] ?? "")
                let answer = try await HTTPClient.shared.execute(forwarded, timeout: .seconds(10))
                return try await answer.body.collect(upTo: 1 << 20)
            }
            let router = Router()
            router.get("/users/\(bob.whisperId)/keys") { request, _ -> Response in
                let body = try await forward(request)
                fetched.continuation.yield()
                for await _ in released.stream { break }
                return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: body))
            }
            // The directory's own endpoints pass at once.
            router.get("/kt/**") { request, _ -> Response in
                Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: try await forward(request)))
            }
            try await RunningService.serving(router).running { server in
                let slow = WhisperAPI(
                    endpoints: WhisperEndpoints(websocket: "ws://unused/ws", auth: server.baseURL, attachments: auth, turn: auth),
                    directory: aliceAPI.directory
                )
                let late = Task { try await slow.keys(of: bob.whisperId, sessionToken: alice.token) }
                for await _ in fetched.stream { break }
                // Meanwhile another lookup of the same client moves its head to a newer epoch.
                let carol = try await stack.user(on: 0)
                try await Self.waitForPublication(stack)
                let newer = try await aliceAPI.keys(of: carol.whisperId, sessionToken: alice.token).head
                #expect(newer.epoch > first.head.epoch)
                released.continuation.yield()
                let lookup = try await late.value
                #expect(lookup.keys == bob.peerKeys)
                #expect(lookup.head == first.head)
                #expect(await aliceAPI.directory.head == newer)
            }
        }
    }

    @Test func aProofWithAnyOneByteFlippedIsRefused() async throws {
        try await MessagingStack.start(routers: 1).running { stack in
            let alice = try await stack.user(on: 0), bob = try await stack.user(on: 1)
            _ = try await Self.api(stack).keys(of: bob.whisperId, sessionToken: alice.token)
            let reply = try await HTTP.json(.GET, "\(stack.auth.baseURL)/users/\(bob.whisperId)/keys", token: alice.token)
            let proof = try JSONDecoder().decode(KeyProof.self, from: JSONSerialization.data(withJSONObject: try #require(reply.json["proof"])))
            let keys = TestServers.directorySigner.publicKeys
            let state = KeyDirectory.KeyState.active(encPublicKey: bob.keys.encPublicKey, signPublicKey: bob.keys.signPublicKey)
            #expect(throws: Never.self) { _ = try proof.verify(whisperId: bob.whisperId, state: state, keys: keys, held: DirectoryHead?.none) }

            func flipped(_ base64: String, _ index: Int) -> String {
                var bytes = [UInt8](Data(base64Encoded: base64)!)
                bytes[index] ^= 0x01
                return Data(bytes).base64EncodedString()
            }
            var tried = 0
            func expectRefused(_ changed: KeyProof, _ what: String) {
                tried += 1
                #expect(throws: KeyTransparencyError.self, "\(what)") { _ = try changed.verify(whisperId: bob.whisperId, state: state, keys: keys, held: DirectoryHead?.none) }
            }
            for index in 0..<VRF.proofBytes {
                var changed = proof
                changed.vrfProof = flipped(proof.vrfProof, index)
                expectRefused(changed, "VRF proof byte \(index)")
            }
            for index in 0..<32 {
                var changed = proof
                changed.opening = flipped(proof.opening, index)
                expectRefused(changed, "opening byte \(index)")
                changed = proof
                changed.head.prefixRoot = flipped(proof.head.prefixRoot, index)
                expectRefused(changed, "prefix root byte \(index)")
                changed = proof
                changed.head.logRoot = flipped(proof.head.logRoot, index)
                expectRefused(changed, "log root byte \(index)")
            }
            for index in 0..<64 {
                var changed = proof
                changed.head.signature = flipped(proof.head.signature, index)
                expectRefused(changed, "signature byte \(index)")
            }
            for (sibling, hash) in proof.siblings.enumerated() {
                for index in 0..<32 {
                    var changed = proof
                    changed.siblings[sibling] = flipped(hash, index)
                    expectRefused(changed, "sibling \(sibling) byte \(index)")
                }
            }
            var other = proof
            other.head.epoch += 1
            expectRefused(other, "another epoch")
            #expect(throws: KeyTransparencyError.self) { _ = try proof.verify(whisperId: alice.whisperId, state: state, keys: keys, held: DirectoryHead?.none) }
            #expect(tried > 80 + 3 * 32 + 64)
        }
    }

    @Test func theDirectoryEndpointsAreBoundedPerClientAddressAndTheAuditorWaitsItOut() async throws {
        try await MessagingStack.start(routers: 1, auth: {
            $0.limits[.directoryPerAddress] = RateLimitRule(capacity: 2, period: .seconds(2))
            $0.common.trustedProxies = TrustedProxies("127.0.0.1/32")!
        }).running { stack in
            _ = try await stack.user(on: 0)
            try await Self.waitForPublication(stack)
            func get(_ path: String, from client: String) async throws -> (status: Int, retryAfter: String?) {
                var request = HTTPClientRequest(url: stack.auth.baseURL + path)
                request.headers.add(name: "X-Forwarded-For", value: client)
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
                _ = try await response.body.collect(upTo: 1 << 20)
                return (Int(response.status.code), response.headers.first(name: "Retry-After"))
            }
            // One address has two requests of the endpoints together, then 429.
            for path in ["/kt/keys", "/kt/epochs/1"] {
                #expect(try await get(path, from: "203.0.113.5").status == 200, "\(path)")
            }
            let refused = try await get("/kt/head", from: "203.0.113.5")
            #expect(refused.status == 429)
            #expect(refused.retryAfter.flatMap { Int($0) } != nil)
            // Another address is not touched by it.
            #expect(try await get("/kt/head", from: "203.0.113.6").status == 200)

            // The auditor (one address, this test's: the keys, the head and each epoch are
            // more than two requests) waits the refusals out and checks every epoch.
            let epochs = Int(try await Self.epoch(stack))
            let api = Self.api(stack)
            let auditor = DirectoryAuditor(keys: try await api.directoryKeys())
            #expect(try await auditor.follow(api) >= epochs)
        }
    }
}
