import Foundation
import WhisperClient
import WhisperProtocol

/// What `listen` and `fetch` do with what arrives: verify and decrypt each message,
/// print it once, save its attachment when asked, then acknowledge it (verify,
/// decrypt, store, then the receipt); keep the groups file current from group
/// events; print delivery receipts.
actor Inbox {
    let session: Session
    let json: Bool
    let attachmentsDirectory: URL?
    private var deduplicator = MessageDeduplicator()
    private(set) var printed = 0
    /// `listen`'s session object, once it keeps the connection.
    private var live: WhisperSession?

    init(session: Session, json: Bool, attachmentsDirectory: URL?) {
        self.session = session
        self.json = json
        self.attachmentsDirectory = attachmentsDirectory
    }

    /// Walks the whole pending queue, page by page, handling and acknowledging as it goes;
    /// stops early once `limit` messages have been printed.
    func drainPending(limit: Int? = nil) async throws {
        var cursor: String?
        repeat {
            let after = cursor
            let page = try await session.withSession { connection, _ in try await connection.fetchPending(cursor: after) }
            for message in page.messages {
                try await handle(message)
                if let limit, printed >= limit { return }
            }
            cursor = page.nextCursor
        } while cursor != nil
    }

    /// How a run over one socket's unasked frames ended.
    enum Ending: Sendable {
        /// `stopAfter` messages were printed.
        case done
        /// The socket closed.
        case closed
        /// The session was revoked (`session_revoked`), with the reason.
        case revoked(String)
        case failed(CLIFailure)
    }

    /// Acknowledgements go through the session object from now on (`listen`).
    func acknowledge(through live: WhisperSession) {
        self.live = live
    }

    /// Handles what the session object hands over until `stopAfter` messages have been
    /// printed; new credentials are kept in the profile.
    func consume(_ events: AsyncStream<SessionEvent>, through session: Session, stopAfter limit: Int?) async -> Ending {
        for await event in events {
            do {
                switch event {
                case .message(let message): try await handle(message)
                case .receipt(let receipt): note(receipt)
                case .frame(let frame): try await handle(frame)
                case .credentials(let credentials): try await session.adopt(credentials)
                case .directoryAlert(let problem):
                    warn("the key directory check of your own entry failed: \(CLIFailure.from(problem, doing: "monitor"))")
                case .outgoing, .presenceSnapshot, .floor, .whisperer, .listener: break
                }
            } catch let failure as CLIFailure where failure.exitCode != 69 {
                return .failed(failure)
            } catch {
                // An acknowledgement that could not be written: the socket is closing, and
                // the message comes again on the next one.
            }
            if let limit, printed >= limit { return .done }
        }
        return .closed
    }

    /// Handles frames until the socket closes, the session is revoked, or `stopAfter`
    /// messages have been printed.
    func consume(_ events: AsyncStream<ServerFrame>, stopAfter limit: Int?) async -> Ending {
        for await frame in events {
            if frame.type == .sessionRevoked {
                return .revoked(frame.payload(as: SessionRevoked.self)?.reason.rawValue ?? "revoked")
            }
            do {
                try await handle(frame)
            } catch let failure as CLIFailure where failure.exitCode != 69 {
                return .failed(failure)
            } catch {
                // An acknowledgement that could not be written: the socket is closing.
            }
            if let limit, printed >= limit { return .done }
        }
        return .closed
    }

    /// Handles one unasked frame (messages, receipts, group events; others are ignored).
    func handle(_ frame: ServerFrame) async throws {
        switch frame.type {
        case .messageReceived:
            if let message = frame.payload(as: MessageReceived.self) { try await handle(message) }
        case .messageDelivered:
            if let receipt = frame.payload(as: MessageDelivered.self) { note(receipt) }
        case .groupCreated:
            if let created = frame.payload(as: GroupCreated.self) {
                try session.profile.save(group: Profile.Group(created))
                emit(
                    ["type": "group_created", "groupId": created.groupId, "title": created.title, "by": created.createdBy],
                    text: "added to group \(created.groupId) \"\(Self.printable(created.title))\" by \(session.profile.shown(created.createdBy))"
                )
            }
        case .groupUpdated:
            if let updated = frame.payload(as: GroupUpdated.self) {
                let me = await session.whisperId
                let member = updated.memberIds.contains(me)
                if member {
                    try session.profile.save(group: Profile.Group(updated))
                } else {
                    try session.profile.forget(group: updated.groupId)
                }
                let change = member ? "changed by \(updated.updatedBy): \(updated.memberIds.count) members" : "left (removed by \(updated.updatedBy))"
                emit(
                    ["type": "group_updated", "groupId": updated.groupId, "title": updated.title, "by": updated.updatedBy, "member": member],
                    text: "group \(updated.groupId) \"\(Self.printable(updated.title))\" \(change)"
                )
            }
        case .groupInvited:
            if let invitation = frame.payload(as: GroupInvitation.self) {
                emit(
                    ["type": "group_invited", "groupId": invitation.groupId, "title": invitation.title, "by": invitation.invitedBy],
                    text: "invited to group \(invitation.groupId) \"\(Self.printable(invitation.title))\" by \(session.profile.shown(invitation.invitedBy)) (whisper group accept|decline)"
                )
            }
        default:
            break
        }
    }

    func handle(_ message: MessageReceived) async throws {
        let me = await session.me
        let conversation = message.groupId ?? message.from
        guard deduplicator.firstSighting(message.messageId, in: conversation) else {
            // Seen already this run: acknowledge again (harmless) so it leaves the queue.
            try await acknowledge(message)
            return
        }
        let sender: PeerKeys
        do {
            sender = try await session.peer(message.from)
        } catch let error as WhisperAPIError {
            // The sender's keys cannot be had (banned): nothing to verify it with.
            warn("cannot look up \(message.from) for message \(message.messageId): \(CLIFailure.from(error, doing: "key lookup"))")
            try await acknowledge(message)
            return
        } catch CLIFailure.noSuchIdentity(let said) {
            // The sender's account is gone since it sent this: nothing to verify it with.
            warn("message \(message.messageId) dropped: \(said)")
            try await acknowledge(message)
            return
        }
        let plaintext: [UInt8]
        do {
            plaintext = try MessageCrypto.open(message, by: me, sender: sender)
        } catch {
            warn("dropped message \(message.messageId) from \(message.from): \(error == .badSignature ? "bad signature" : "cannot decrypt")")
            try await acknowledge(message)
            return
        }
        if let head = message.directoryHead { await compare(head, of: message) }
        var savedPath: String?
        if let pointer = message.attachment, let attachmentsDirectory {
            savedPath = try await save(pointer, of: message, sender: sender, in: attachmentsDirectory)
        }
        let text = String(decoding: plaintext, as: UTF8.self)
        try? session.profile.remember(message.from)
        var fields: [String: Any] = [
            "type": "message", "messageId": message.messageId, "from": message.from, "text": text, "timestamp": message.timestamp,
            "msgType": message.msgType.rawValue,
        ]
        if let groupId = message.groupId { fields["groupId"] = groupId }
        if let savedPath { fields["attachment"] = savedPath }
        let name = session.profile.name(of: message.from)
        if let name { fields["fromName"] = name }
        let place = message.groupId.map { " @ \($0)" } ?? ""
        let attached = savedPath.map { " [attachment saved to \($0)]" } ?? (message.attachment != nil ? " [attachment]" : "")
        emit(fields, text: "\(Profile.shown(message.from, name: name))\(place): \(Self.printable(text))\(attached)")
        printed += 1
        try await acknowledge(message)
    }

    /// The head the sender held, compared with this profile's log: one not on it (the two
    /// are shown different directories) is said at once, as an alert line. A head that
    /// cannot be compared now (no answer) is let go: the sender's next one is compared.
    private func compare(_ head: DirectoryHead, of message: MessageReceived) async {
        do {
            try await session.api.compareHead(head, from: message.from)
        } catch let problem as KeyTransparencyError {
            let said = CLIFailure.from(problem, doing: "message \(message.messageId) from \(message.from)")
            let name = switch problem {
            case .splitView: "splitView"
            case .staleHead: "staleHead"
            default: "keyDirectory"
            }
            emit(["type": "alert", "alert": name, "messageId": message.messageId, "from": message.from], text: "ALERT: \(said)")
        } catch {
            return
        }
    }

    private func note(_ receipt: MessageDelivered) {
        var fields: [String: Any] = ["type": "receipt", "messageId": receipt.messageId, "status": receipt.status.rawValue, "from": receipt.from ?? ""]
        let name = receipt.from.flatMap(session.profile.name(of:))
        if let name { fields["fromName"] = name }
        emit(fields, text: "\(receipt.status.rawValue): \(receipt.messageId)\(receipt.from.map { " by \(Profile.shown($0, name: name))" } ?? "")")
    }

    private func acknowledge(_ message: MessageReceived) async throws {
        if let live {
            try await live.acknowledge(message)
        } else {
            try await session.withSession { connection, _ in try await connection.acknowledge(message) }
        }
    }

    private func save(_ pointer: AttachmentPointer, of message: MessageReceived, sender: PeerKeys, in directory: URL) async throws -> String? {
        let me = await session.me
        let api = session.api
        do {
            let file = try await session.withSession { _, token in
                try await api.fetchAttachment(pointer, recipient: me.keys, sender: sender, sessionToken: token)
            }
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let url = directory.appendingPathComponent("\(message.messageId).\(Self.fileExtension(pointer.contentType))")
            do {
                try Profile.storePrivately(Data(file), at: url)
            } catch {
                warn("cannot write \(url.path): \(error)")
                return nil
            }
            return url.path
        } catch {
            warn("attachment of \(message.messageId) not saved: \(CLIFailure.from(error, doing: "download"))")
            return nil
        }
    }

    private func emit(_ fields: [String: Any], text: String) {
        let line: String
        if json, let data = try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys]) {
            line = String(decoding: data, as: UTF8.self)
        } else {
            line = text
        }
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    private func warn(_ text: String) {
        FileHandle.standardError.write(Data("whisper: \(text)\n".utf8))
    }

    /// Text from another person, safe for a terminal: control characters (escape
    /// sequences among them) are shown as U+FFFD, newlines and tabs kept.
    static func printable(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.map { scalar in
            // Kept: newline, tab, and the zero-width joiner of emoji sequences.
            if scalar == "\n" || scalar == "\t" || scalar == "\u{200D}" { return scalar }
            return scalar.properties.generalCategory == .control || scalar.properties.generalCategory == .format ? "\u{FFFD}" : scalar
        }))
    }

    static func fileExtension(_ contentType: String) -> String {
        switch contentType.lowercased() {
        case "image/jpeg": "jpg"
        case "image/png": "png"
        case "image/gif": "gif"
        case "image/webp": "webp"
        case "audio/ogg": "ogg"
        case "audio/mpeg": "mp3"
        case "audio/mp4", "audio/aac": "m4a"
        case "application/pdf": "pdf"
        case "text/plain": "txt"
        default: "bin"
        }
    }
}
