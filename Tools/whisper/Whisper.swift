import ArgumentParser
import Crypto
import Foundation
import Logging
import WhisperClient
import WhisperProtocol

/// `whisper`: the command-line client, on the SDK alone. How an operator checks a
/// deployment end to end, and how scripts talk to a Whisper server.
/// Standard output, a line at a time, in a pipe or a file too: `monitor`, `listen` and
/// `ptt watch` run until stopped, and stdio's block buffering showed nothing there until
/// they ended. Every `print` of this tool is this one.
func print(_ items: Any..., separator: String = " ", terminator: String = "\n") {
    FileHandle.standardOutput.write(Data((items.map { "\($0)" }.joined(separator: separator) + terminator).utf8))
}

@main
struct Whisper: AsyncParsableCommand {

    static let configuration = CommandConfiguration(
        commandName: "whisper",
        abstract: "A command-line client for a Whisper server.",
        discussion: """
            Start with `whisper init` (a new identity) or `whisper init --recover` (an \
            identity from its 12-word phrase). Everything is kept in ~/.whisper (or \
            --home, or $WHISPER_HOME); identity.json holds the phrase and is readable by \
            its owner only.

            Exit codes: 0 done; 1 refused by the server; 64 bad usage; 65 bad input (a \
            mistyped Whisper ID); 69 server unreachable; 75 try later (rate limited); \
            77 not allowed (session revoked, banned, forbidden); 78 no identity or \
            damaged profile.
            """,
        subcommands: [
            Init.self, SignIn.self, Identity.self, Send.self, Listen.self, Fetch.self, GroupCommand.self, Backup.self, Contacts.self, Keys.self, Monitor.self,
            LiveCommand.self, PTTCommand.self, Account.self,
        ]
    )
}

/// Options every command takes.
struct Common: ParsableArguments {
    @Option(help: "The profile folder (default $WHISPER_HOME, else ~/.whisper).")
    var home: String?

    @Flag(name: .long, help: "Log the SDK's connection events to stderr.")
    var verbose = false

    var profile: Profile { Profile.locate(home) }

    var logger: Logger {
        var logger = Logger(label: "whisper") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .critical
        return logger
    }

    /// An open session for the profile's identity.
    func session() async throws -> Session {
        let session = try Session(profile: profile, logger: logger)
        try await session.open()
        return session
    }
}

// MARK: - init

struct Init: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create an identity, or recover one from its recovery phrase.",
        discussion: """
            Without --recover a new 12-word phrase is made and shown once on stderr: \
            write it down, it is the only way back to the identity. With --recover the \
            phrase is read from --mnemonic-file, or else from standard input (never from \
            the command line, where other users could see it). Prints the Whisper ID.
            """
    )

    @OptionGroup var common: Common

    @Option(help: "The deployment's public origin (https://chat.example.org): the WebSocket at /ws, HTTP beside it.")
    var server: String?

    @Option(help: "A `scripts/up` stack on this host (ports 8080, 8081, 8084, 8085). The default when --server is not given.")
    var localHost: String?

    @Option(help: "Override the WebSocket URL.") var websocket: String?
    @Option(help: "Override auth's base URL.") var authURL: String?
    @Option(help: "Override attachment-signer's base URL.") var attachmentsURL: String?
    @Option(help: "Override turn-cred's base URL.") var turnURL: String?

    @Flag(help: "Recover the identity of an existing phrase instead of making a new one.")
    var recover = false

    @Option(help: "Read the phrase from this file (with --recover).")
    var mnemonicFile: String?

    @Flag(help: "Replace the identity already in the profile folder.")
    var force = false

    @Option(help: "The platform this device registers as: ios or android (which push service would wake it; this command takes no pushes itself).")
    var platform: Platform = .android
    @Option(name: .customLong("auditor-key"), help: "A third-party auditor whose word every key lookup requires (its Ed25519 public key, base64, as `whisper-audit --print-public-key` prints it); repeat for several.")
    var auditorKeys: [String] = []

    func endpoints() throws -> WhisperEndpoints {
        var endpoints: WhisperEndpoints
        if let server {
            guard let edge = WhisperEndpoints.edge(server) else {
                throw CLIFailure.badInput("--server must be an http:// or https:// URL, not `\(server)`")
            }
            endpoints = edge
        } else {
            endpoints = .local(host: localHost ?? "127.0.0.1")
        }
        if let websocket { endpoints.websocket = try Self.checked(websocket, "--websocket", schemes: ["ws", "wss"]) }
        if let authURL { endpoints.auth = try Self.checked(authURL, "--auth-url", schemes: ["http", "https"]) }
        if let attachmentsURL { endpoints.attachments = try Self.checked(attachmentsURL, "--attachments-url", schemes: ["http", "https"]) }
        if let turnURL { endpoints.turn = try Self.checked(turnURL, "--turn-url", schemes: ["http", "https"]) }
        return endpoints
    }

    /// `value` when it is a URL with one of `schemes` and a host; else what to type instead.
    static func checked(_ value: String, _ option: String, schemes: [String]) throws -> String {
        guard let url = URL(string: value), let scheme = url.scheme?.lowercased(), schemes.contains(scheme),
              let host = url.host, !host.isEmpty else {
            let forms = schemes.map { "\($0)://" }.joined(separator: " or ")
            throw CLIFailure.badInput("\(option) must be a \(forms) URL with a host, not `\(value)`")
        }
        return value
    }

    func readPhrase() throws -> String {
        let text: String
        if let mnemonicFile {
            guard let data = FileManager.default.contents(atPath: mnemonicFile) else {
                throw CLIFailure.badInput("cannot read \(mnemonicFile)")
            }
            text = String(decoding: data.prefix(4_096), as: UTF8.self)
        } else {
            FileHandle.standardError.write(Data("Recovery phrase (12 words): ".utf8))
            text = readLine(strippingNewline: true) ?? ""
        }
        let words = BIP39.normalizedWords(text).joined(separator: " ")
        guard BIP39.isValid(words) else {
            throw CLIFailure.badInput("that is not a valid recovery phrase (12 words from the BIP39 English list, checksum included); check each word")
        }
        return words
    }

    func run() async throws {
        try await guarded("init") {
            let profile = common.profile
            if profile.exists && !force {
                throw CLIFailure.badInput("\(profile.directory.path) already holds an identity; pass --force to replace it (its phrase is in identity.json)")
            }
            let endpoints = try endpoints()
            for key in auditorKeys where Data(base64Encoded: key)?.count != 32 {
                throw CLIFailure.badInput("--auditor-key `\(key)` is not an Ed25519 public key (32 bytes in base64)")
            }
            let mnemonic = recover ? try readPhrase() : BIP39.generateMnemonic()
            let keys = try WhisperKeys(mnemonic: mnemonic)
            let deviceId = RandomID.uuid()
            let connection = WhisperConnection(url: endpoints.websocket, logger: common.logger)
            do {
                try await connection.connect()
            } catch {
                throw CLIFailure.unreachable(endpoints.websocket, error)
            }
            let ack = try await connection.register(keys: keys, deviceId: deviceId, platform: platform)
            await connection.close()
            try profile.save(Profile.Identity(
                mnemonic: mnemonic, whisperId: ack.whisperId, deviceId: deviceId, endpoints: endpoints,
                sessionToken: ack.sessionToken, sessionExpiresAt: ack.sessionExpiresAt, auditorKeys: auditorKeys.isEmpty ? nil : auditorKeys,
                platform: platform
            ))
            if !recover {
                FileHandle.standardError.write(Data("""
                    Your recovery phrase; write it down, it is the only way back to this identity:

                        \(mnemonic)

                    It is also stored in \(profile.directory.path)/identity.json (readable by you only).

                    """.utf8))
            }
            print(ack.whisperId)
        }
    }
}

// MARK: - signin

struct SignIn: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signin",
        abstract: "Sign this profile in again from its phrase (takes the identity back from another device)."
    )

    @OptionGroup var common: Common

    func run() async throws {
        try await guarded("signin") {
            let session = try Session(profile: common.profile, logger: common.logger)
            try await session.connect()
            try await session.signIn()
            await session.close()
            print(await session.whisperId)
        }
    }
}

// MARK: - id

struct Identity: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "id", abstract: "Print this profile's Whisper ID.")

    @OptionGroup var common: Common

    func run() async throws {
        try await guarded("id") {
            print(try common.profile.identity().whisperId)
        }
    }
}

// MARK: - send

struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a message (and optionally a file) to a Whisper ID.",
        discussion: "Returns once the server has stored the message; prints its messageId."
    )

    @OptionGroup var common: Common

    @Argument(help: "The recipient: a Whisper ID (WSP-XXXX-XXXX-XXXX) or a contact's name.") var recipient: String
    @Argument(help: "The text (a caption with --attach).") var text: String

    @Option(help: "A file to send with the message, encrypted and uploaded.") var attach: String?
    @Option(help: "The attachment's MIME type (default: from its extension).") var contentType: String?
    @Option(help: "The messageId this one answers.") var replyTo: String?

    func run() async throws {
        try await guarded("send") {
            let to = try common.profile.recipient(recipient)
            let plaintext = try messageBytes(text)
            let file = try attach.map { try Attachment.read($0, contentType: contentType) }
            let session = try await common.session()
            defer { Task { await session.close() } }
            let peer = try await session.peer(to)
            let me = await session.me
            let api = session.api
            let messageId = RandomID.uuid()
            let accepted = try await session.withSession { connection, token in
                var attachment: AttachmentPointer?
                if let file {
                    let objectKey = try await api.upload(file.sealed, contentType: file.contentType, sessionToken: token)
                    attachment = AttachmentCrypto.pointer(to: file.sealed, objectKey: objectKey, contentType: file.contentType, from: me.keys, to: peer)
                }
                // The directory head this profile holds goes with the message, for the
                // recipient to compare with its own.
                let message = MessageCrypto.makeMessage(
                    plaintext, from: me, to: peer, sessionToken: token, msgType: file?.messageType ?? .text, messageId: messageId,
                    replyTo: replyTo, attachment: attachment, directoryHead: await api.directory.head
                )
                return try await connection.send(message)
            }
            try common.profile.remember(to)
            print(accepted.messageId)
        }
    }
}

/// The text of a message as its plaintext bytes, refused when its box would pass
/// `MAX_TEXT_BYTES` (the server would refuse it).
func messageBytes(_ text: String) throws -> [UInt8] {
    let plaintext = Array(text.utf8)
    guard plaintext.count + Limits.BOX_OVERHEAD_BYTES <= Limits.MAX_TEXT_BYTES else {
        throw CLIFailure.badInput("the text is \(plaintext.count) bytes; at most \(Limits.MAX_TEXT_BYTES - Limits.BOX_OVERHEAD_BYTES) fit in one message")
    }
    return plaintext
}

/// A file read for sending: sealed, with its type.
struct Attachment {
    let sealed: AttachmentCrypto.SealedFile
    let contentType: String
    let messageType: MessageType

    static func read(_ path: String, contentType: String?) throws -> Attachment {
        let url = URL(fileURLWithPath: path)
        guard let size = (try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? Int else {
            throw CLIFailure.badInput("cannot read \(path)")
        }
        let type = contentType ?? guessType(url.pathExtension)
        let limit = type.hasPrefix("image/") ? Limits.MAX_IMAGE_BYTES : type.hasPrefix("audio/") ? Limits.MAX_VOICE_BYTES : Limits.MAX_FILE_BYTES
        guard size >= 1, size + SecretBox.overheadBytes <= limit else {
            throw CLIFailure.badInput("\(path) is \(size) bytes; a \(type) attachment may be 1 to \(limit - SecretBox.overheadBytes)")
        }
        guard let data = FileManager.default.contents(atPath: path) else { throw CLIFailure.badInput("cannot read \(path)") }
        let kind: MessageType = type.hasPrefix("image/") ? .image : type.hasPrefix("audio/") ? .voice : .file
        return Attachment(sealed: AttachmentCrypto.seal([UInt8](data)), contentType: type, messageType: kind)
    }

    static func guessType(_ fileExtension: String) -> String {
        switch fileExtension.lowercased() {
        case "jpg", "jpeg": "image/jpeg"
        case "png": "image/png"
        case "gif": "image/gif"
        case "webp": "image/webp"
        case "ogg", "opus": "audio/ogg"
        case "mp3": "audio/mpeg"
        case "m4a": "audio/mp4"
        case "pdf": "application/pdf"
        case "txt": "text/plain"
        default: "application/octet-stream"
        }
    }
}

// MARK: - listen, fetch

struct Listen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print messages as they arrive, and acknowledge them.",
        discussion: """
            First walks what waited while offline, then prints live messages, receipts \
            and group changes until interrupted. Stays connected by itself (the SDK's \
            WhisperSession: backoff with jitter, draining gateways, dead sockets, session \
            refresh); ends (exit 77) when another device signs in with the phrase.
            """
    )

    @OptionGroup var common: Common
    @Flag(help: "One JSON object per line instead of text.") var json = false
    @Option(help: "Exit after this many messages.") var count: Int?
    @Option(help: "Decrypt attachments into this folder.") var saveAttachments: String?

    func run() async throws {
        try await guarded("listen") {
            if let count, count < 1 { throw CLIFailure.badInput("--count must be at least 1") }
            // The stored session, refreshed (or signed in again from the phrase once it
            // expired); from then on the SDK's session object keeps the connection.
            let session = try await common.session()
            await session.close()
            let live = await session.keepConnected()
            let inbox = Inbox(session: session, json: json, attachmentsDirectory: saveAttachments.map { URL(fileURLWithPath: $0) })
            await inbox.acknowledge(through: live)
            let count = self.count
            let end = await Session.untilSignedOut(live, connected: {
                FileHandle.standardError.write(Data("listening as \(await session.whisperId)\n".utf8))
            }) { await inbox.consume(live.events, through: session, stopAfter: count) }
            switch end {
            case .signedOut(let reason), .consumed(.revoked(let reason)):
                throw CLIFailure.notAllowed(CLIFailure.sessionEnded(reason))
            case .consumed(.failed(let failure)):
                throw failure
            case .consumed(.done), .consumed(.closed), .stopped:
                return
            }
        }
    }
}

struct Fetch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print and acknowledge every message waiting, then exit.")

    @OptionGroup var common: Common
    @Flag(help: "One JSON object per line instead of text.") var json = false
    @Option(help: "Decrypt attachments into this folder.") var saveAttachments: String?

    func run() async throws {
        try await guarded("fetch") {
            let session = try await common.session()
            let inbox = Inbox(session: session, json: json, attachmentsDirectory: saveAttachments.map { URL(fileURLWithPath: $0) })
            let connection = await session.connection
            let consumer = Task { await inbox.consume(connection.events, stopAfter: nil) }
            try await inbox.drainPending()
            await session.close()
            if case .failed(let error) = await consumer.value { throw error }
            FileHandle.standardError.write(Data("\(await inbox.printed) message(s)\n".utf8))
        }
    }
}

// MARK: - groups

struct GroupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "group", abstract: "Create, change, list and message groups.",
        subcommands: [Create.self, Add.self, Remove.self, SendToGroup.self, List.self, Invitations.self, Accept.self, Decline.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create a group with these members; prints its ID.",
            discussion: "A group starts with you and at least one other member (up to 254); more join later with `whisper group add`."
        )
        @OptionGroup var common: Common
        @Argument(help: "The title (1 to 128 characters).") var title: String
        @Argument(help: "The other members, by Whisper ID or contact's name: at least one.") var members: [String] = []

        func run() async throws {
            try await guarded("group create") {
                guard !members.isEmpty else {
                    throw CLIFailure.badInput("a group starts with at least one other member: `whisper group create TITLE WSP-…` (add more later with `whisper group add`)")
                }
                let ids = try members.map(common.profile.recipient)
                let session = try await common.session()
                defer { Task { await session.close() } }
                let created = try await session.withSession { connection, _ in try await connection.createGroup(title: title, memberIds: ids) }
                try common.profile.save(group: Profile.Group(created))
                print(created.groupId)
                if let invited = created.invited, !invited.isEmpty {
                    // Not direct peers yet: they join by accepting (`whisper group accept`).
                    FileHandle.standardError.write(Data("whisper: invited, not added: \(invited.joined(separator: " "))\n".utf8))
                }
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add members (owner only).")
        @OptionGroup var common: Common
        @Argument var groupId: String
        @Argument(help: "Whisper IDs or contacts' names.") var members: [String]

        func run() async throws {
            try await guarded("group add") {
                try await change(common, groupId, add: try members.map(common.profile.recipient), remove: nil)
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove members (owner only), or leave with one's own ID.")
        @OptionGroup var common: Common
        @Argument var groupId: String
        @Argument(help: "Whisper IDs or contacts' names.") var members: [String]

        func run() async throws {
            try await guarded("group remove") {
                try await change(common, groupId, add: nil, remove: try members.map(common.profile.recipient))
            }
        }
    }

    static func change(_ common: Common, _ groupId: String, add: [String]?, remove: [String]?) async throws {
        let session = try await common.session()
        defer { Task { await session.close() } }
        let updated = try await session.withSession { connection, _ in try await connection.updateGroup(groupId, add: add, remove: remove) }
        if updated.memberIds.contains(await session.whisperId) {
            try common.profile.save(group: Profile.Group(updated))
        } else {
            try common.profile.forget(group: updated.groupId)
        }
        print(updated.memberIds.joined(separator: " "))
    }

    struct SendToGroup: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "send", abstract: "Send a message to every member of a group (one signed copy each)."
        )
        @OptionGroup var common: Common
        @Argument var groupId: String
        @Argument var text: String

        func run() async throws {
            try await guarded("group send") {
                guard let group = try common.profile.groups()[groupId] else {
                    throw CLIFailure.badInput("unknown group \(groupId): `whisper fetch` or `whisper listen` learns the groups this identity was added to")
                }
                let plaintext = try messageBytes(text)
                let session = try await common.session()
                defer { Task { await session.close() } }
                let me = await session.me
                var keys: [PeerKeys] = []
                for member in group.memberIds where member != me.whisperId { keys.append(try await session.peer(member)) }
                let members = keys
                let messageId = RandomID.uuid()
                let timestamp = Clock.millisecondsNow()
                let outcomes = try await session.withSession { connection, token in
                    let copies = MessageCrypto.makeGroupCopies(
                        plaintext, groupId: groupId, from: me, to: members, sessionToken: token, messageId: messageId, timestamp: timestamp
                    )
                    return await connection.sendGroup(copies).mapValues { outcome in outcome.mapError { CLIFailure.from($0, doing: "copy") } }
                }
                let failed = outcomes.filter { if case .failure = $0.value { true } else { false } }
                for (member, outcome) in failed.sorted(by: { $0.key < $1.key }) {
                    if case .failure(let failure) = outcome {
                        FileHandle.standardError.write(Data("whisper: not sent to \(member): \(failure.description)\n".utf8))
                    }
                }
                print(messageId)
                if !failed.isEmpty { throw ExitCode(1) }
            }
        }
    }

    struct Invitations: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List open invitations to groups (from identities that are not direct peers): ID, title, inviter, members."
        )
        @OptionGroup var common: Common

        func run() async throws {
            try await guarded("group invitations") {
                let session = try await common.session()
                defer { Task { await session.close() } }
                let invitations = try await session.withSession { connection, _ in try await connection.groupInvitations() }
                for invitation in invitations {
                    print("\(invitation.groupId)\t\(Inbox.printable(invitation.title))\t\(invitation.invitedBy)\t\(invitation.memberCount)")
                }
            }
        }
    }

    struct Accept: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Accept an invitation: join the group.")
        @OptionGroup var common: Common
        @Argument var groupId: String

        func run() async throws {
            try await guarded("group accept") {
                let session = try await common.session()
                defer { Task { await session.close() } }
                let joined = try await session.withSession { connection, _ in try await connection.acceptGroupInvitation(groupId) }
                try common.profile.save(group: Profile.Group(joined))
                print(joined.memberIds.joined(separator: " "))
            }
        }
    }

    struct Decline: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Decline an invitation; nobody is told.")
        @OptionGroup var common: Common
        @Argument var groupId: String

        func run() async throws {
            try await guarded("group decline") {
                let session = try await common.session()
                defer { Task { await session.close() } }
                try await session.withSession { connection, _ in try await connection.declineGroupInvitation(groupId) }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the groups this profile knows.")
        @OptionGroup var common: Common

        func run() async throws {
            try await guarded("group list") {
                for group in try common.profile.groups().values.sorted(by: { $0.groupId < $1.groupId }) {
                    print("\(group.groupId)\t\(Inbox.printable(group.title))\t\(group.memberIds.joined(separator: ","))")
                }
            }
        }
    }
}

// MARK: - backup, contacts, keys

struct Account: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The identity's account on the server.", subcommands: [Delete.self])

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete the identity for good, on the server and in this profile.",
            discussion: """
                Everything of the identity on the server goes: its waiting messages, groups (the \
                members are told it left), live conversations, push-to-talk channels, contacts \
                backup and attachments; its Whisper ID is never given out again. Then this \
                profile's files are removed. Asks for the Whisper ID as confirmation; \
                --confirm gives it without a prompt.
                """
        )
        @OptionGroup var common: Common
        @Option(help: "The profile's Whisper ID, as confirmation without a prompt.") var confirm: String?

        func run() async throws {
            try await guarded("account delete") {
                let whisperId = try common.profile.identity().whisperId
                let typed: String
                if let confirm {
                    typed = confirm
                } else {
                    // On stderr, unbuffered: the prompt shows before the input is read.
                    FileHandle.standardError.write(Data("This deletes \(whisperId) for good. Type its Whisper ID to confirm: ".utf8))
                    typed = readLine(strippingNewline: true)?.trimmingCharacters(in: .whitespaces) ?? ""
                }
                guard typed.uppercased() == whisperId else { throw CLIFailure.badInput("account delete: not confirmed; nothing was deleted") }
                let session = try await common.session()
                defer { Task { await session.close() } }
                let keys = session.keys
                let deleted = try await session.withSession { connection, _ in try await connection.deleteAccount(keys: keys) }
                try common.profile.erase()
                print("deleted \(deleted.whisperId); this profile is empty")
            }
        }
    }
}

struct Backup: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Store or restore the contact list, sealed with a key from the phrase.",
        subcommands: [Push.self, Pull.self]
    )

    struct Push: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Seal the local contact list and store it on the server.")
        @OptionGroup var common: Common

        func run() async throws {
            try await guarded("backup push") {
                let contacts = try common.profile.contacts()
                let session = try await common.session()
                defer { Task { await session.close() } }
                let keys = session.keys
                let api = session.api
                let updatedAt = try await session.withSession { _, token in
                    try await api.pushContactsBackup(ContactsBackup(contacts: contacts), keys: keys, sessionToken: token)
                }
                print("stored \(contacts.count) contact(s) at \(Timestamp.readable(updatedAt))")
            }
        }
    }

    struct Pull: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch and open the stored contact list, merged into the local one (the backup's entries win)."
        )
        @OptionGroup var common: Common

        func run() async throws {
            try await guarded("backup pull") {
                let session = try await common.session()
                defer { Task { await session.close() } }
                let keys = session.keys
                let api = session.api
                guard let pulled = try await session.withSession({ _, token in try await api.pullContactsBackup(keys: keys, sessionToken: token) }) else {
                    throw CLIFailure.refused("backup pull: no backup stored for this identity")
                }
                var merged = pulled.backup.contacts
                let restored = Set(merged.map(\.whisperId))
                merged += try common.profile.contacts().filter { !restored.contains($0.whisperId) }
                try common.profile.save(contacts: merged)
                print("restored \(pulled.backup.contacts.count) contact(s) from \(Timestamp.readable(pulled.updatedAt))")
            }
        }
    }
}

struct Contacts: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "The local contact list.", subcommands: [Add.self, List.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add a contact (or rename one).")
        @OptionGroup var common: Common
        @Argument var whisperId: String
        @Option(help: "A name to show.") var name: String?

        func run() async throws {
            try await guarded("contacts add") {
                _ = try common.profile.identity()
                try common.profile.remember(try parseWhisperID(whisperId), name: name)
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the contacts.")
        @OptionGroup var common: Common

        func run() async throws {
            try await guarded("contacts list") {
                for contact in try common.profile.contacts() {
                    print("\(contact.whisperId)\t\(Inbox.printable(contact.displayName ?? ""))")
                }
            }
        }
    }
}

struct Keys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Look up a Whisper ID's public keys and standing, proven by the key directory.",
        discussion: """
        Every lookup is checked against the server's key directory (docs/key-transparency.md); \
        the head it was proven in is printed, and kept in the profile so no later run accepts an \
        older log. --verify also checks your own entry and prints the head's digest, to compare \
        with your contact's (`whisper keys --verify` on their side) over another channel.
        """
    )
    @OptionGroup var common: Common
    @Argument(help: "A Whisper ID (WSP-XXXX-XXXX-XXXX) or a contact's name.") var whisperId: String
    @Flag(help: "Also check your own entry, and print the head's digest for comparing with a contact.")
    var verify = false

    func run() async throws {
        try await guarded("keys") {
            let id = try common.profile.recipient(whisperId)
            let session = try await common.session()
            defer { Task { await session.close() } }
            let lookup = try await session.lookup(id)
            print("whisperId      \(lookup.keys.whisperId)")
            if let name = common.profile.name(of: id) { print("contact        \(Inbox.printable(name))") }
            print("status         \(lookup.status)")
            print("encPublicKey   \(Data(lookup.keys.encPublicKey).base64EncodedString())")
            print("signPublicKey  \(Data(lookup.keys.signPublicKey).base64EncodedString())")
            print("fingerprint    \(Fingerprint.of(lookup.keys))")
            print("directory      proven in epoch \(lookup.head.epoch)")
            if verify {
                let head = try await session.checkOwnEntry()
                print("own entry      your keys, in epoch \(head.epoch)")
                print("head           epoch \(head.epoch) log \(Fingerprint.digest(head))")
            }
        }
    }
}

struct Monitor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Watch this identity's own entry in the key directory.",
        discussion: """
        Looks yourself up as anyone would and checks that the directory holds your keys and \
        that each head extends the last. Exits 1 at once when it does not: someone may have \
        been given keys you did not register.
        """
    )
    @OptionGroup var common: Common
    @Option(help: "Seconds between checks (at least 10: a smaller value is taken as 10).")
    var every = 300
    @Flag(help: "Check once and exit.")
    var once = false

    func run() async throws {
        try await guarded("monitor") {
            let session = try await common.session()
            defer { Task { await session.close() } }
            while true {
                do {
                    let head = try await session.checkOwnEntry()
                    print("\(ISO8601DateFormatter().string(from: Date()))  ok: your keys, epoch \(head.epoch), log \(Fingerprint.digest(head))")
                } catch let problem as KeyTransparencyError {
                    print("ALERT: the key directory failed a check: \(problem)")
                    throw ExitCode(1)
                }
                if once { return }
                try await Task.sleep(for: .seconds(max(10, every)))
            }
        }
    }
}

extension Platform: ExpressibleByArgument {}

/// Times as people read them: ISO 8601 in UTC, to the second.
enum Timestamp {
    static func readable(_ milliseconds: Int64) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1_000))
    }
}

/// A short, readable digest of both public keys, for comparing out of band: SHA-256
/// over signPublicKey then encPublicKey, the first 20 bytes as ten groups of four hex digits.
enum Fingerprint {
    /// A head's log root, the first 8 bytes in hex: two people holding the same epoch
    /// compare these.
    static func digest(_ head: DirectoryHead) -> String {
        Array((head.logRootBytes ?? []).prefix(8)).hexString
    }

    static func of(_ keys: PeerKeys) -> String {
        let hex = Array(SHA256.hash(data: keys.signPublicKey + keys.encPublicKey)).prefix(20).hexString
        return stride(from: 0, to: hex.count, by: 4).map { start in
            let from = hex.index(hex.startIndex, offsetBy: start)
            return String(hex[from..<hex.index(from, offsetBy: 4)])
        }.joined(separator: " ")
    }
}
