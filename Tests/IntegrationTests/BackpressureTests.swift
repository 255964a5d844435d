import Foundation
import GatewayService
import RouterService
import Testing
import WhisperClient
import WhisperShared

/// Past the routers' capacity the gateways push back: while the router stream holds
/// `routerBacklogMax` entries not yet handled, new messages are refused with
/// `RATE_LIMITED` (fetches at twice that; receipts never wait for the stream),
/// nothing is added, and the socket is not held to account for it.
@Suite(.serialized)
struct BackpressureTests {
    @Test func aFullBacklogRefusesNewWorkUntilTheRoutersCatchUp() async throws {
        // No router: whatever enters the stream stays there until one starts. The messages
        // are group copies, which take the stream; 1:1 messages are held back by their
        // wait instead (`aSendThatWaitedTooLongIsRefusedAsBusy`).
        try await MessagingStack.start(routers: 0, gateway: { $0.routerBacklogMax = 3 }).running { stack in
            let alice = try await stack.user(on: 0)
            let bob = try await stack.user(on: 1)
            let settings = TestServers.routerSettings(stack.database, redis: stack.redis)
            func withRouter<T: Sendable>(_ body: () async throws -> T) async throws -> T {
                try await RunningService.start { running in
                    buildRouter(settings: settings, logger: TestServers.logger, onServerRunning: running).assembly
                }.running { _ in try await body() }
            }
            // A router for a moment, to make the group.
            let groupId = try await withRouter { try await stack.streamGroup(alice, [bob]) }
            try await waitUntil { try await stack.routerStreamBacklog() == 0 }
            let queued = (0..<3).map { alice.copy("queued \($0)", to: bob, in: groupId) }
            for message in queued { try await alice.connection.sendOnly(message) }
            try await waitUntil { try await stack.routerStreamBacklog() == 3 }

            // Full: refused at the gateway with a retry hint, nothing added.
            do {
                _ = try await alice.connection.send(alice.copy("one too many", to: bob, in: groupId))
                Issue.record("a message past the backlog limit was accepted")
            } catch WhisperClientError.refused(let code, let message) {
                #expect(code == .rateLimited)
                #expect(message.contains("busy") && message.contains("retry in"), "\(message)")
            }
            #expect(try await stack.routerStreamBacklog() == 3)

            // Receipts are served by the gateway and never wait for the stream: not refused.
            for _ in 0..<2 {
                try await bob.connection.sendOnly(DeliveryReceipt(
                    sessionToken: bob.token, .init(messageId: RandomID.uuid(), from: bob.whisperId, to: alice.whisperId,
                    status: .read, timestamp: Clock.millisecondsNow())
                ))
            }
            _ = try await bob.connection.ping()
            #expect(await bob.events.all(.error).isEmpty, "receipts are served while the stream is full")
            #expect(try await stack.routerStreamBacklog() == 3)

            // Fetches still get in, up to twice the limit.
            for _ in 0..<3 {
                try await bob.connection.sendOnly(FetchPending(sessionToken: bob.token, .init(cursor: nil, limit: 1)))
            }
            try await waitUntil { try await stack.routerStreamBacklog() == 6 }
            await expectRefused(.rateLimited, "fetch past twice the limit") { _ = try await bob.connection.fetchPending() }
            #expect(try await stack.routerStreamBacklog() == 6)

            // The server's state is not the client's fault: more refusals than a socket may
            // have (20 in a minute) and the socket stays open.
            for index in 0..<25 {
                await expectRefused(.rateLimited, "busy \(index)") { _ = try await alice.connection.send(alice.copy("busy \(index)", to: bob, in: groupId)) }
            }
            _ = try await alice.connection.ping()
            let busy = try await stack.metricsText(of: [stack.gateways[0]])
            #expect(busy.contains("whisper_gateway_busy_refusals_total 26"), "one message and 25 more refused on gateway 0")

            // A router starts and works the backlog off: what was admitted arrives, in order,
            // and new messages are accepted again.
            try await withRouter {
                let received = try await bob.events(.messageReceived, count: 3)
                #expect(received.compactMap { $0.payload(as: MessageReceived.self)?.messageId } == queued.map(\.messageId))
                try await waitUntil { try await stack.routerStreamBacklog() == 0 }
                _ = try await alice.connection.send(alice.copy("room again", to: bob, in: groupId))
            }
        }
    }
}
