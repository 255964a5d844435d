import HTTPTypes
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import WhisperShared

/// Messages received on a test socket, waiting to be read.
actor Mailbox {
    enum Delivery: Sendable {
        case message(WebSocketMessage)
        case closed
        case timedOut
    }

    private var queued: [WebSocketMessage] = []
    private var closed = false
    private var waiter: (id: Int, continuation: CheckedContinuation<Delivery, Never>)?
    private var nextWaiterID = 0

    func put(_ message: WebSocketMessage) {
        if let waiter {
            self.waiter = nil
            waiter.continuation.resume(returning: .message(message))
        } else {
            queued.append(message)
        }
    }

    func close() {
        closed = true
        waiter?.continuation.resume(returning: .closed)
        waiter = nil
    }

    func next(timeout: Duration) async -> Delivery {
        if !queued.isEmpty { return .message(queued.removeFirst()) }
        if closed { return .closed }
        nextWaiterID += 1
        let id = nextWaiterID
        return await withCheckedContinuation { continuation in
            waiter = (id, continuation)
            Task {
                try? await Task.sleep(for: timeout)
                self.expire(id)
            }
        }
    }

    private func expire(_ id: Int) {
        guard let waiter, waiter.id == id else { return }
        self.waiter = nil
        waiter.continuation.resume(returning: .timedOut)
    }
}

/// A WebSocket client for tests: send frames, read server frames one by one.
struct WebSocketSession: Sendable {
    let outbound: WebSocketOutboundWriter
    let mailbox: Mailbox

    func send(_ text: String) async throws {
        try await outbound.write(.text(text))
    }

    /// The next server frame, decoded; fails when the socket closes or after `timeout`.
    func receive(timeout: Duration = .seconds(5)) async throws -> ServerFrame {
        guard let message = try await next(timeout: timeout) else {
            throw TestSetupError("socket closed while waiting for a frame")
        }
        guard case .text(let text) = message else { throw TestSetupError("expected a text frame") }
        return try ServerFrameCodec.decode(Array(text.utf8))
    }

    /// The next message, or nil once the server has closed the socket.
    func next(timeout: Duration) async throws -> WebSocketMessage? {
        switch await mailbox.next(timeout: timeout) {
        case .message(let message): return message
        case .closed: return nil
        case .timedOut: throw TestSetupError("no frame within \(timeout)")
        }
    }
}

enum WebSocketTest {
    /// Connects to `url`, runs `body`, and returns the close frame the server sent, if any.
    @discardableResult
    static func connect(
        _ url: String, headers: HTTPFields = [:],
        _ body: @escaping @Sendable (WebSocketSession) async throws -> Void
    ) async throws -> WebSocketCloseFrame? {
        try await WebSocketClient.connect(
            url: url,
            configuration: .init(maxFrameSize: 1 << 21, additionalHeaders: headers, autoPing: .disabled),
            logger: TestServers.logger
        ) { inbound, outbound, _ in
            let mailbox = Mailbox()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    do {
                        for try await message in inbound.messages(maxSize: 1 << 21) {
                            await mailbox.put(message)
                        }
                    } catch {}
                    await mailbox.close()
                }
                try await body(WebSocketSession(outbound: outbound, mailbox: mailbox))
                group.cancelAll()
            }
        }
    }
}
