import Foundation
import PostgresNIO
import Testing
import WhisperProtocol
import WhisperClient
import WhisperMessaging
import WhisperShared

/// The `whisper` command-line client as a person runs it: separate processes, each with
/// its own profile folder, against the eight services running as processes.
@Suite struct CommandLineClientTests {
    /// One run of `whisper`, its output in files (read while it runs).
    final class Run: @unchecked Sendable {
        let process: Process
        let stdout: URL
        let stderr: URL
        /// What the test types, when it asked for a pipe.
        let input: Pipe?

        init(_ arguments: [String], home: URL, scratch: URL, typed: Bool = false) throws {
            let name = UUID().uuidString
            stdout = scratch.appendingPathComponent("\(name).out")
            stderr = scratch.appendingPathComponent("\(name).err")
            FileManager.default.createFile(atPath: stdout.path, contents: nil)
            FileManager.default.createFile(atPath: stderr.path, contents: nil)
            process = Process()
            process.executableURL = URL(fileURLWithPath: "\(Executables.binPath)/whisper")
            process.arguments = arguments + ["--home", home.path]
            process.environment = ["PATH": "/usr/bin:/bin", "HOME": scratch.path]
            process.standardOutput = try FileHandle(forWritingTo: stdout)
            process.standardError = try FileHandle(forWritingTo: stderr)
            input = typed ? Pipe() : nil
            process.standardInput = input ?? FileHandle.nullDevice
            try process.run()
        }

        var output: String { (try? String(contentsOf: stdout, encoding: .utf8)) ?? "" }
        var errors: String { (try? String(contentsOf: stderr, encoding: .utf8)) ?? "" }

        /// Waits for the process to end; returns its exit status.
        func finish(timeout: Duration = .seconds(60)) async throws -> Int32 {
            do {
                try await waitUntil(timeout: timeout) { !self.process.isRunning }
            } catch {
                process.terminate()
                throw TestSetupError("whisper \(process.arguments ?? []) did not finish; stderr: \(errors)")
            }
            return process.terminationStatus
        }

        /// The JSON lines it printed.
        var lines: [[String: Any]] {
            output.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        }
    }

    let stack: ProcessStack
    let scratch: URL

    init() async throws {
        stack = try await ProcessStack.start()
        scratch = FileManager.default.temporaryDirectory.appendingPathComponent("whisper-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
    }

    func home(_ name: String) -> URL { scratch.appendingPathComponent(name) }

    func start(_ arguments: [String], as name: String, typed: Bool = false) throws -> Run {
        try Run(arguments, home: home(name), scratch: scratch, typed: typed)
    }

    /// Runs to the end; returns status, stdout (trimmed) and stderr.
    func run(_ arguments: [String], as name: String) async throws -> (status: Int32, output: String, errors: String) {
        let run = try start(arguments, as: name)
        let status = try await run.finish()
        return (status, run.output.trimmingCharacters(in: .whitespacesAndNewlines), run.errors)
    }

    /// `whisper init` against this stack; returns the new Whisper ID.
    func initialise(_ name: String, extra: [String] = []) async throws -> String {
        let endpoints = try [
            "--websocket", "ws://127.0.0.1:\(stack.service("gateway").port)/ws",
            "--auth-url", stack.service("auth").baseURL,
            "--attachments-url", stack.service("attachment-signer").baseURL,
            "--turn-url", stack.service("turn-cred").baseURL,
        ]
        let result = try await run(["init"] + endpoints + extra, as: name)
        try #require(result.status == 0, "init failed: \(result.errors)")
        try #require(WhisperID.isValid(result.output), "init printed \(result.output)")
        return result.output
    }

    /// Starts `whisper listen --json` and waits until it is listening.
    func listen(_ name: String, count: Int) async throws -> Run {
        let run = try start(["listen", "--json", "--count", "\(count)"], as: name)
        try await waitUntil(timeout: .seconds(60)) {
            guard run.process.isRunning else { throw TestSetupError("listen ended early: \(run.errors)") }
            return run.errors.contains("listening as")
        }
        return run
    }

    @Test func oneSendsAnotherListensAGroupReachesThreeAndABackupRecoversFromThePhrase() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let alice = try await initialise("alice"), bob = try await initialise("bob")
        let carol = try await initialise("carol"), dave = try await initialise("dave")
        #expect(Set([alice, bob, carol, dave]).count == 4)

        // The profile holds the phrase: readable by its owner only.
        let identityFile = home("alice").appendingPathComponent("identity.json")
        let attributes = try FileManager.default.attributesOfItem(atPath: identityFile.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let folderAttributes = try FileManager.default.attributesOfItem(atPath: home("alice").path)
        #expect((folderAttributes[.posixPermissions] as? Int) == 0o700)

        // 1:1: bob listens, alice sends a text and a photo; bob prints the decrypted text,
        // saves the decrypted photo, and acknowledges both.
        let text = "hello from the command line \(RandomID.uuid())"
        let photo = SecureBytes.random(20_000)
        let photoFile = scratch.appendingPathComponent("photo.jpg")
        try Data(photo).write(to: photoFile)
        let saved = scratch.appendingPathComponent("bob-attachments")
        let bobListening = try start(["listen", "--json", "--count", "2", "--save-attachments", saved.path], as: "bob")
        try await waitUntil(timeout: .seconds(60)) { bobListening.errors.contains("listening as") }
        let sent = try await run(["send", bob, text], as: "alice")
        #expect(sent.status == 0, "\(sent.errors)")
        let sentPhoto = try await run(["send", bob, "the photo", "--attach", photoFile.path], as: "alice")
        #expect(sentPhoto.status == 0, "\(sentPhoto.errors)")
        #expect(try await bobListening.finish() == 0, "\(bobListening.errors)")
        let heard = bobListening.lines.filter { $0["type"] as? String == "message" }
        #expect(heard.count == 2)
        #expect(heard.first?["text"] as? String == text)
        #expect(heard.first?["from"] as? String == alice)
        #expect(heard.first?["messageId"] as? String == sent.output)
        let photoLine = heard.last
        #expect(photoLine?["messageId"] as? String == sentPhoto.output)
        #expect(photoLine?["msgType"] as? String == "image")
        let savedPath = try #require(photoLine?["attachment"] as? String)
        #expect(savedPath.hasPrefix(saved.path))
        #expect(try [UInt8](Data(contentsOf: URL(fileURLWithPath: savedPath))) == photo)
        // Acknowledged: bob's pending queue empties (the last receipt was written just
        // before listen closed its socket).
        let redis = try #require(stack.redisConfiguration)
        try await TestServers.withRedis(redis) { client in
            try await waitUntil(timeout: .seconds(30)) { try await PendingQueue(redis: client).depth(recipient: bob) == 0 }
        }

        // A group: three members listen, alice creates it and sends once; each prints it.
        // Alice and the three have written to each other: she adds them (strangers would be invited).
        try await TestServers.withRedis(redis) { try await MessagingStack.makePeers([alice, bob, carol, dave], on: $0) }
        let listeners = try await [listen("bob", count: 1), listen("carol", count: 1), listen("dave", count: 1)]
        // A group of no one else is refused in words before anything is sent.
        let lonely = try await run(["group", "create", "Just me"], as: "alice")
        #expect(lonely.status == 65 && lonely.errors.contains("at least one other member"), "\(lonely.errors)")
        let created = try await run(["group", "create", "Command line", bob, carol, dave], as: "alice")
        #expect(created.status == 0, "\(created.errors)")
        let groupId = created.output
        #expect(groupId.hasPrefix("grp-"))
        let groupText = "to all three \(RandomID.uuid())"
        let groupSend = try await run(["group", "send", groupId, groupText], as: "alice")
        #expect(groupSend.status == 0, "\(groupSend.errors)")
        for (listener, member) in zip(listeners, [bob, carol, dave]) {
            #expect(try await listener.finish() == 0, "\(member): \(listener.errors)")
            let messages = listener.lines.filter { $0["type"] as? String == "message" }
            #expect(messages.count == 1, "\(member) printed \(listener.output)")
            #expect(messages.first?["text"] as? String == groupText)
            #expect(messages.first?["groupId"] as? String == groupId)
            #expect(messages.first?["messageId"] as? String == groupSend.output)
            // The member's profile learned the group from its event.
            let list = try await run(["group", "list"], as: member == bob ? "bob" : member == carol ? "carol" : "dave")
            #expect(list.output.contains(groupId))
        }
        // Removing a member: dave is no longer sent to.
        let removed = try await run(["group", "remove", groupId, dave], as: "alice")
        #expect(removed.status == 0)
        #expect(!removed.output.contains(dave))
        // Were alice and dave strangers, adding dave again would be an invitation, which
        // dave lists and accepts.
        try await TestServers.withRedis(redis) { client in
            _ = try await client.pipeline([
                RedisCommand("ZREM", [RedisKeys.peers(alice), dave]), RedisCommand("ZREM", [RedisKeys.peers(dave), alice]),
            ])
        }
        let invited = try await run(["group", "add", groupId, dave], as: "alice")
        #expect(invited.status == 0 && !invited.output.contains(dave), "\(invited.errors)")
        let invitations = try await run(["group", "invitations"], as: "dave")
        #expect(invitations.status == 0 && invitations.output.hasPrefix(groupId) && invitations.output.contains(alice), "\(invitations.errors)")
        let accepted = try await run(["group", "accept", groupId], as: "dave")
        #expect(accepted.status == 0 && accepted.output.contains(dave), "\(accepted.errors)")

        // The contacts backup: alice names bob, pushes; a second profile recovered from
        // alice's phrase pulls the same list.
        #expect(try await run(["contacts", "add", bob, "--name", "Bob the builder"], as: "alice").status == 0)
        #expect(try await run(["contacts", "add", dave], as: "alice").status == 0)
        let pushed = try await run(["backup", "push"], as: "alice")
        #expect(pushed.status == 0, "\(pushed.errors)")
        // The time as people read it (ISO 8601, UTC), not milliseconds.
        #expect(pushed.output.range(of: #"stored 2 contact\(s\) at \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"#, options: .regularExpression) != nil, "\(pushed.output)")
        let aliceContacts = try await run(["contacts", "list"], as: "alice").output
        let phrase = try JSONSerialization.jsonObject(with: Data(contentsOf: identityFile)) as? [String: Any]
        let phraseFile = scratch.appendingPathComponent("alice.phrase")
        try Data(((phrase?["mnemonic"] as? String) ?? "").utf8).write(to: phraseFile)
        let recovered = try await initialise("alice-again", extra: ["--recover", "--mnemonic-file", phraseFile.path])
        #expect(recovered == alice)
        let pulled = try await run(["backup", "pull"], as: "alice-again")
        #expect(pulled.status == 0, "\(pulled.errors)")
        #expect(pulled.output.range(of: #"from \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"#, options: .regularExpression) != nil, "\(pulled.output)")
        let restored = try await run(["contacts", "list"], as: "alice-again").output
        #expect(restored == aliceContacts)
        #expect(restored.contains("\(bob)\tBob the builder"))
        #expect(restored.contains(dave))

        // The first profile's session ended when the second signed in: it says so (77),
        // and `signin` takes the identity back.
        let stale = try await run(["send", bob, "still here?"], as: "alice")
        #expect(stale.status == 77, "\(stale.errors)")
        #expect(stale.errors.contains("whisper signin"))
        #expect(try await run(["signin"], as: "alice").output == alice)
        #expect(try await run(["send", bob, "back again"], as: "alice").status == 0)

        // Deleting the account: a wrong confirmation deletes nothing (65); the ID typed at
        // the prompt deletes it, empties the profile, and others find it no more.
        let unconfirmed = try await run(["account", "delete", "--confirm", bob], as: "alice")
        #expect(unconfirmed.status == 65, "\(unconfirmed.errors)")
        #expect(try await run(["send", bob, "not deleted"], as: "alice").status == 0)
        let deleting = try start(["account", "delete"], as: "alice", typed: true)
        try await waitUntil(timeout: .seconds(60)) { deleting.errors.contains("Type its Whisper ID") }
        deleting.input?.fileHandleForWriting.write(Data("\(alice)\n".utf8))
        #expect(try await deleting.finish() == 0, "\(deleting.errors)")
        #expect(deleting.output.contains("deleted \(alice)"))
        #expect(!FileManager.default.fileExists(atPath: identityFile.path))
        #expect(try await run(["id"], as: "alice").status == 78)
        let gone = try await run(["send", alice, "anyone?"], as: "bob")
        #expect(gone.status == 67 && gone.errors.contains("its account was deleted"), "\(gone.errors)")
    }

    /// `whisper listen` compares the head each message brings with its profile's log: a
    /// sender's genuine head raises nothing, and a head the directory signed over another
    /// log for the same epoch (the sender was shown another directory) is an alert line
    /// naming the sender, beside the message.
    /// `whisper monitor` runs until stopped; its lines reach a file (or a pipe) as they are
    /// printed, not when the process ends.
    @Test func theMonitorsLinesReachAFileWhileItRuns() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        _ = try await initialise("alice")
        let monitor = try start(["monitor", "--every", "10"], as: "alice")
        defer { if monitor.process.isRunning { monitor.process.terminate() } }
        try await waitUntil(timeout: .seconds(60)) {
            guard monitor.process.isRunning else { throw TestSetupError("monitor ended: \(monitor.errors)") }
            return monitor.output.contains("ok: your keys")
        }
        #expect(monitor.process.isRunning)
    }

    /// `init --platform ios` registers the device as iOS (the default is android), and
    /// later sign-ins of the profile keep it.
    @Test func thePlatformIsChosenAtInitAndKept() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let alice = try await initialise("alice", extra: ["--platform", "ios"])
        let bob = try await initialise("bob")
        let saved = try JSONSerialization.jsonObject(with: Data(contentsOf: home("alice").appendingPathComponent("identity.json"))) as? [String: Any]
        #expect(saved?["platform"] as? String == "ios")
        let settings = try #require(stack.database)
        let client = PostgresClient(configuration: settings.clientConfiguration, backgroundLogger: TestServers.logger)
        let platforms = try await withThrowingTaskGroup(of: [String: String].self) { group in
            group.addTask { await client.run(); return [:] }
            var found: [String: String] = [:]
            for id in [alice, bob] {
                let rows = try await client.query("SELECT platform FROM devices WHERE whisper_id = \(id) AND active", logger: TestServers.logger)
                for try await platform in rows.decode(String.self) { found[id] = platform }
            }
            group.cancelAll()
            return found
        }
        #expect(platforms == [alice: "ios", bob: "android"])
        let refused = try await run(["init", "--platform", "windows", "--force"], as: "carol")
        #expect(refused.status != 0 && refused.errors.contains("platform"), "\(refused.errors)")
    }

    /// A banned identity is told it is banned, not that `whisper signin` takes it back
    /// (which the ban refuses while it lasts).
    @Test func aBannedListenerIsToldOfTheBanNotToSignInAgain() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let alice = try await initialise("alice")
        let listening = try await listen("alice", count: 1)
        let (status, _) = try await HTTP.json(
            .POST, "\(try stack.service("admin").baseURL)/admin/ban", token: stack.adminToken, body: ["whisperId": alice, "reason": "spam waves"]
        )
        #expect(status == 200)
        let exit = try await listening.finish()
        #expect(exit == 77, "\(listening.errors)")
        #expect(listening.errors.contains("banned"), "\(listening.errors)")
        #expect(!listening.errors.contains("whisper signin` takes"), "\(listening.errors)")
    }

    /// Addresses that are no URL, or a server that is not there, are said in words with
    /// their exit codes (65, 69), never as a raw Swift error.
    @Test func wrongAddressesAndAnAbsentServerAreSaidInWords() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        for (arguments, option) in [
            (["--server", "chat example org"], "--server"), (["--auth-url", "localhost:8081"], "--auth-url"),
            (["--websocket", "http://127.0.0.1:8080/ws"], "--websocket"),
        ] {
            let result = try await run(["init"] + arguments, as: "nobody-\(option)")
            #expect(result.status == 65, "\(arguments): \(result.errors)")
            #expect(result.errors.contains("\(option) must be"), "\(result.errors)")
            #expect(!result.errors.contains("HTTPClientError"))
        }
        let closed = try TestServers.freePort()
        let absent = try await run(["init", "--websocket", "ws://127.0.0.1:\(closed)/ws", "--auth-url", "http://127.0.0.1:\(closed)"], as: "nobody")
        #expect(absent.status == 69, "\(absent.errors)")
        #expect(absent.errors.contains("could not be reached"), "\(absent.errors)")
    }

    @Test func aSendersHeadFromAnotherLogIsAnAlertWhereTheMessageIsRead() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let bob = try await initialise("bob")
        let gateway = "ws://127.0.0.1:\(try stack.service("gateway").port)/ws", auth = try stack.service("auth").baseURL
        // Carol writes from an app of her own, on the SDK's lower layers.
        let carolKeys = try WhisperKeys(mnemonic: BIP39.generateMnemonic())
        let carol = WhisperConnection(url: gateway, logger: TestServers.logger)
        try await carol.connect()
        let signedIn = try await carol.register(keys: carolKeys, deviceId: RandomID.uuid(), platform: .android)
        let api = WhisperAPI(endpoints: WhisperEndpoints(websocket: gateway, auth: auth, attachments: auth, turn: auth), directory: DirectoryView())
        let bobKeys = try await api.keys(of: bob, sessionToken: signedIn.sessionToken)
        let genuine = bobKeys.head
        let signer = Ed25519.KeyPair(seed: TestServers.directorySigningSeed)
        let otherLog = Array(repeating: UInt8(7), count: 32)
        let prefixRoot = try #require(genuine.prefixRootBytes)
        let forged = DirectoryHead(
            epoch: genuine.epoch, logRoot: otherLog, prefixRoot: prefixRoot, publishedAt: genuine.publishedAt, keyId: Ed25519.keyId(signer.publicKey),
            signature: signer.sign(DirectoryHead.signedBytes(epoch: genuine.epoch, logRoot: otherLog, prefixRoot: prefixRoot, publishedAt: genuine.publishedAt))
        )

        let listening = try await listen("bob", count: 2)
        for (text, head) in [("on the log", genuine), ("on another log", forged)] {
            _ = try await carol.send(MessageCrypto.makeMessage(
                Array(text.utf8), from: (signedIn.whisperId, carolKeys), to: bobKeys.keys, sessionToken: signedIn.sessionToken, directoryHead: head
            ))
        }
        #expect(try await listening.finish() == 0, "\(listening.errors)")
        await carol.close()
        #expect(listening.lines.filter { $0["type"] as? String == "message" }.count == 2)
        let alerts = listening.lines.filter { $0["type"] as? String == "alert" }
        #expect(alerts.count == 1)
        #expect(alerts.first?["alert"] as? String == "splitView" && alerts.first?["from"] as? String == signedIn.whisperId, "\(alerts)")
    }

    /// A profile made with `--auditor-key` requires that auditor's word on every head: with
    /// none delivered, `whisper keys` refuses the lookup and says why; the same lookup from
    /// a profile without one is proven as usual.
    @Test func aProfileThatRequiresAnAuditorRefusesAHeadNoAuditorSigned() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let auditor = Ed25519.KeyPair(seed: SecureBytes.random(32))
        let bob = try await initialise("bob")
        _ = try await initialise("alice", extra: ["--auditor-key", Data(auditor.publicKey).base64EncodedString()])
        let refused = try await run(["keys", bob], as: "alice")
        #expect(refused.status != 0 && refused.errors.contains("none of the auditors you require signed a recent head"), "\(refused)")
        _ = try await initialise("carol")
        let proven = try await run(["keys", bob], as: "carol")
        #expect(proven.status == 0, "\(proven.errors)")
        // A key that is not one is refused when the profile is made.
        let wrong = try await run(["init", "--auditor-key", "not-a-key", "--force"], as: "dave")
        #expect(wrong.status != 0 && wrong.errors.contains("is not an Ed25519 public key"), "\(wrong)")
    }

    @Test func oneWhispersLiveAndAnotherListensFromTheLink() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        _ = try await initialise("sam")
        let whisper = try start(["live", "--new", "Kitchen table", "--name", "Sam"], as: "sam", typed: true)
        var link = ""
        try await waitUntil(timeout: .seconds(60)) {
            guard whisper.process.isRunning else { throw TestSetupError("live ended early: \(whisper.errors)") }
            guard let found = whisper.errors.split(separator: " ").first(where: { $0.contains("/listen/") }) else { return false }
            link = found.trimmingCharacters(in: .whitespacesAndNewlines)
            return true
        }
        // A listener without any identity, from the link; the Whisperer lets it in by key.
        let listen = try start(["live", "listen", link, "--name", "Ada", "--json"], as: "ada")
        try await waitUntil(timeout: .seconds(60)) { whisper.errors.contains("Ada asks to listen") }
        whisper.input?.fileHandleForWriting.write(Data("/admit\n".utf8))
        try await waitUntil(timeout: .seconds(60)) { listen.lines.contains { $0["event"] as? String == "admitted" } }
        whisper.input?.fileHandleForWriting.write(Data("Good evening\nHello\n".utf8))
        try await waitUntil(timeout: .seconds(60)) {
            listen.lines.contains { $0["event"] as? String == "text" && $0["past"] as? [String] == ["Good evening", "Hello"] }
        }
        // Every keystroke went out on its own: the listener saw the line grow.
        let lives = listen.lines.compactMap { $0["live"] as? String }
        #expect(lives.contains("Good") && lives.contains("Good eve"))
        // The Whisperer ends; the listener is told and keeps waiting.
        whisper.input?.fileHandleForWriting.write(Data("/quit\n".utf8))
        #expect(try await whisper.finish() == 0, "\(whisper.errors)")
        try await waitUntil(timeout: .seconds(60)) { listen.lines.contains { $0["event"] as? String == "whisperer_left" } }
        #expect(listen.process.isRunning)
        listen.process.terminate()
        // A second run of the listener is the same device: recognised and let in at once.
        let again = try start(["live", "listen", link, "--name", "Ada", "--json"], as: "ada")
        let back = try start(["live", "--name", "Sam"], as: "sam", typed: true)
        try await waitUntil(timeout: .seconds(60)) { again.lines.contains { $0["event"] as? String == "admitted" } }
        #expect(back.errors.contains("Ada is back"))
        #expect(!back.errors.contains("asks to listen"))
        back.input?.fileHandleForWriting.write(Data("/quit\n".utf8))
        #expect(try await back.finish() == 0)
        again.process.terminate()
        // Ada's conversations, with their links; a second terminal of hers joins her
        // profile with a code and has them too.
        let listed = try await run(["live", "conversations", link], as: "ada")
        #expect(listed.status == 0 && listed.output.contains("Kitchen table (Sam)") && listed.output.contains(link), "\(listed)")
        let named = try await run(["live", "profile", link, "--rename", "Ada Okafor"], as: "ada")
        #expect(named.status == 0 && named.output.contains("Ada Okafor, 1 device"), "\(named)")
        let shared = try await run(["live", "profile", link, "--share"], as: "ada")
        let code = try #require(shared.output.split(separator: " ").dropFirst().first.map(String.init), "\(shared)")
        let joined = try await run(["live", "profile", link, "--join", code.lowercased()], as: "ada-laptop")
        #expect(joined.status == 0 && joined.output.contains("Ada Okafor, 2 devices"), "\(joined)")
        let theirs = try await run(["live", "conversations", link], as: "ada-laptop")
        #expect(theirs.status == 0 && theirs.output.contains("Kitchen table (Sam)"), "\(theirs)")
        let guessed = try await run(["live", "profile", link, "--join", "22222222"], as: "bo")
        #expect(guessed.status == 1 && guessed.errors.contains("NOT_FOUND"), "\(guessed)")
        // A browser joins the same profile with a code the terminal made, as a second
        // browser would with the page's link.
        let forBrowser = try await run(["live", "profile", link, "--share"], as: "ada")
        let browserCode = try #require(forBrowser.output.split(separator: " ").dropFirst().first.map(String.init), "\(forBrowser)")
        let base = String(link.prefix(upTo: try #require(link.range(of: "/listen/")).lowerBound))
        let browser = try ListenPageFlow(
            "listen_profile_flow.py", base: base, conversationId: String(link.split(separator: "/").last ?? ""), artifacts: "listen-cli-profile",
            extra: ["--join-code", browserCode, "--expect", "You are Ada Okafor, on 3 devices"]
        )
        let joinedInBrowser = try await browser.finish()
        #expect(joinedInBrowser.status == 0, "listen_profile_flow.py --join-code: \(joinedInBrowser.output)")
        let three = try await run(["live", "profile", link], as: "ada-laptop")
        #expect(three.output.contains("Ada Okafor, 3 devices"), "\(three)")
        // A link that is not one.
        let wrong = try await run(["live", "listen", "http://127.0.0.1:1/nowhere"], as: "ada")
        #expect(wrong.status == 65)
    }

    @Test func pushToTalkChannelsAndTheFloorFromTwoTerminals() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let alice = try await initialise("alice"), bob = try await initialise("bob"), carol = try await initialise("carol")
        let created = try await run(["ptt", "create", "Trail crew", "--is-public"], as: "alice")
        let parts = created.output.split(separator: " ").map(String.init)
        #expect(created.status == 0 && parts.count == 2, "\(created.errors)")
        let (channelId, code) = (parts[0], parts[1])
        // Found nearby (the same 5 km cell), joined by its code.
        #expect(try await run(["ptt", "announce", channelId, "--lat", "47.6097", "--lon=-122.3331", "--count", "1"], as: "alice").status == 0)
        #expect(try await run(["ptt", "nearby", "--lat", "47.6101", "--lon=-122.3340"], as: "bob").output == "\(code) 1 Trail crew")
        #expect(try await run(["ptt", "join", code], as: "bob").output == channelId)
        #expect(try await run(["ptt", "list"], as: "bob").output == "\(channelId) \(code) 2 Trail crew")
        #expect(try await run(["ptt", "join", channelId], as: "carol").output == channelId)

        // Bob watches; Alice holds the floor until return.
        let watch = try start(["ptt", "watch", channelId, "--json", "--count", "2"], as: "bob")
        try await waitUntil(timeout: .seconds(60)) {
            guard watch.process.isRunning else { throw TestSetupError("watch ended: \(watch.errors)") }
            return watch.errors.contains("watching")
        }
        let hold = try start(["ptt", "hold", channelId], as: "alice", typed: true)
        try await waitUntil(timeout: .seconds(60)) { hold.output.contains("granted") }
        // Carol cannot take it meanwhile (a run of Bob's profile would take his session from the watcher).
        #expect(try await run(["ptt", "hold", channelId], as: "carol").status == 75)
        hold.input?.fileHandleForWriting.write(Data("\n".utf8))
        #expect(try await hold.finish() == 0, "\(hold.errors)")
        #expect(hold.output.contains("released"))
        #expect(try await watch.finish() == 0, "\(watch.errors)")
        let events = watch.lines.map { "\($0["outcome"] ?? "") \($0["holder"] as? String ?? "-")" }
        #expect(events == ["granted \(alice)", "released -"])

        // A hold follows the floor: another run of Alice's profile takes her session, and
        // with its socket the floor; the holding run says it lost it and ends.
        let holding = try start(["ptt", "hold", channelId], as: "alice", typed: true)
        try await waitUntil(timeout: .seconds(60)) { holding.output.contains("granted") }
        #expect(try await run(["ptt", "list"], as: "alice").status == 0)
        let status = try await holding.finish(timeout: .seconds(30))
        #expect(status == 69 || status == 75, "\(holding.errors)")
        #expect(holding.output.split(separator: "\n").last == "lost", "\(holding.output)")
        #expect(holding.errors.contains("floor"), "\(holding.errors)")

        // A watcher comes back, as `listen` does, when another run of its profile used the
        // session, and goes on printing.
        let watching = try start(["ptt", "watch", channelId, "--json"], as: "bob")
        defer { watching.process.terminate() }
        try await waitUntil(timeout: .seconds(60)) { watching.errors.contains("watching") }
        #expect(try await run(["ptt", "list"], as: "bob").status == 0)
        try await waitUntil(timeout: .seconds(60)) {
            guard watching.process.isRunning else { throw TestSetupError("watch ended: \(watching.errors)") }
            return watching.errors.components(separatedBy: "watching").count - 1 >= 2
        }
        let again = try start(["ptt", "hold", channelId], as: "alice", typed: true)
        try await waitUntil(timeout: .seconds(60)) { again.output.contains("granted") }
        try await waitUntil(timeout: .seconds(60)) { watching.lines.contains { $0["holder"] as? String == alice } }
        again.input?.fileHandleForWriting.write(Data("\n".utf8))
        #expect(try await again.finish() == 0, "\(again.errors)")
        _ = (bob, carol)
    }

    /// Contacts' names work where IDs do (send, keys, group members) and are shown beside
    /// the IDs that listen and fetch print. A well-formed ID the server does not know is
    /// said apart from a typo, and one whose keys were proven to this profile is said deleted.
    @Test func contactsNamesServeAsAddressesAndADeletedAccountIsSaidSo() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        let alice = try await initialise("alice"), bob = try await initialise("bob"), carol = try await initialise("carol")
        #expect(try await run(["contacts", "add", bob, "--name", "Bob"], as: "alice").status == 0)
        #expect(try await run(["contacts", "add", alice, "--name", "Alice L"], as: "bob").status == 0)
        let listening = try await listen("bob", count: 1)
        let sent = try await run(["send", "bob", "hello by name"], as: "alice")
        #expect(sent.status == 0, "\(sent.errors)")
        #expect(try await listening.finish() == 0, "\(listening.errors)")
        let line = try #require(listening.lines.first { $0["type"] as? String == "message" }, "\(listening.output)")
        #expect(line["from"] as? String == alice)
        #expect(line["fromName"] as? String == "Alice L")
        #expect(line["text"] as? String == "hello by name")
        #expect(try await run(["send", "Bob", "second"], as: "alice").status == 0)
        let fetched = try await run(["fetch"], as: "bob")
        #expect(fetched.output.contains("\(alice) (Alice L): second"), "\(fetched.output)")
        let keys = try await run(["keys", "Bob"], as: "alice")
        #expect(keys.status == 0, "\(keys.errors)")
        #expect(keys.output.contains(bob) && keys.output.contains("contact        Bob"), "\(keys.output)")
        // A name two contacts share asks for the ID; a name nobody has is no address.
        #expect(try await run(["contacts", "add", carol, "--name", "BOB"], as: "alice").status == 0)
        let ambiguous = try await run(["send", "Bob", "which one"], as: "alice")
        #expect(ambiguous.status == 65 && ambiguous.errors.contains("names 2 contacts"), "\(ambiguous.errors)")
        let nobody = try await run(["send", "Robert", "hi"], as: "alice")
        #expect(nobody.status == 65 && nobody.errors.contains("nor a contact's name"), "\(nobody.errors)")
        // Bob deletes his account: Alice, who had his keys proven, is told he deleted it;
        // Carol, who never looked him up, hears what the server says of any unknown ID.
        let deleted = try await run(["account", "delete", "--confirm", bob], as: "bob")
        #expect(deleted.status == 0, "\(deleted.errors)")
        let toDeleted = try await run(["send", bob, "are you there"], as: "alice")
        #expect(toDeleted.status == 67, "\(toDeleted.errors)")
        #expect(toDeleted.errors.contains("\(bob) (Bob) is no longer on this server"), "\(toDeleted.errors)")
        #expect(toDeleted.errors.contains("its account was deleted"), "\(toDeleted.errors)")
        let unknownToCarol = try await run(["keys", bob], as: "carol")
        #expect(unknownToCarol.status == 67, "\(unknownToCarol.errors)")
        #expect(unknownToCarol.errors.contains("never registered here, or its account was deleted"), "\(unknownToCarol.errors)")
    }

    @Test func mistakesGetExitCodesAndMessagesAPersonCanActOn() async throws {
        defer {
            stack.discard()
            try? FileManager.default.removeItem(at: scratch)
        }
        // No profile yet: 78 and what to run.
        let none = try await run(["id"], as: "nobody")
        #expect(none.status == 78)
        #expect(none.errors.contains("whisper init"))
        let alice = try await initialise("alice")
        // A second init does not overwrite the phrase.
        let again = try await run(["init"], as: "alice")
        #expect(again.status == 65)
        #expect(try await run(["id"], as: "alice").output == alice)
        // A typo in a Whisper ID is caught by its checksum before anything is asked.
        var typo = Array(alice)
        typo[5] = typo[5] == "A" ? "B" : "A"
        let mistyped = try await run(["send", String(typo), "hi"], as: "alice")
        #expect(mistyped.status == 65)
        #expect(mistyped.errors.contains("checksum"))
        // A well-formed ID nobody has: 67, and the words say it is no typo.
        let unknown = try await run(["keys", WhisperID.generate()], as: "alice")
        #expect(unknown.status == 67)
        #expect(unknown.errors.contains("was never registered here, or its account was deleted"), "\(unknown.errors)")
        // A phrase that is not one.
        let phraseFile = scratch.appendingPathComponent("bad.phrase")
        try Data("abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon".utf8).write(to: phraseFile)
        let bad = try await run(["init", "--recover", "--mnemonic-file", phraseFile.path, "--local-host", "127.0.0.1"], as: "other")
        #expect(bad.status == 65)
        #expect(bad.errors.contains("recovery phrase"))
        // The help says what the options take: monitor's 10 s floor, whisper-audit's key file.
        let monitorHelp = try await run(["monitor", "--help"], as: "alice")
        #expect(monitorHelp.output.contains("at least 10"), "\(monitorHelp.output)")
        let (_, auditHelp) = try KeyTransparencyTests.audit(["--help"])
        #expect(auditHelp.contains("--keys <path>"), "\(auditHelp)")
        // A server that is not there: 69.
        let port = try TestServers.freePort()
        let away = try await run(["init", "--websocket", "ws://127.0.0.1:\(port)/ws"], as: "elsewhere")
        #expect(away.status == 69)
        #expect(away.errors.contains("cannot reach"))
    }
}
