import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP forwarder on loopback whose "network" can be cut: while cut, nothing passes
/// either way (sockets stay open and silent, as when a phone loses its radio, and new
/// connections are taken but never answered); when it comes back, the sockets of
/// before and during the cut are closed (their streams lost bytes) and new ones pass.
final class CuttableProxy: @unchecked Sendable {
    let port: Int
    private let server: any Channel
    private let state = NIOLockedValueBox(State())

    private struct State {
        var cut = false
        /// When set, each new connection is closed this long after it was accepted.
        var dropAfter: TimeAmount?
        /// Every open pair (client side, server side), and whether it saw a cut.
        var pairs: [ObjectIdentifier: (client: any Channel, server: (any Channel)?, tainted: Bool)] = [:]
    }

    /// Forwards a free loopback port to `targetPort`.
    static func start(to targetPort: Int) async throws -> CuttableProxy {
        let box = NIOLockedValueBox<CuttableProxy?>(nil)
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { client in
                guard let proxy = box.withLockedValue({ $0 }) else { return client.close() }
                return proxy.accept(client, targetPort: targetPort)
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let proxy = CuttableProxy(server: server, port: server.localAddress?.port ?? 0)
        box.withLockedValue { $0 = proxy }
        return proxy
    }

    private init(server: any Channel, port: Int) {
        self.server = server
        self.port = port
    }

    var isCut: Bool { state.withLockedValue { $0.cut } }

    /// From now on every new connection is closed `delay` after it was accepted (a
    /// gateway that takes sockets and drops them); nil: they are kept again.
    func dropEveryConnection(after delay: TimeAmount?) {
        state.withLockedValue { $0.dropAfter = delay }
    }

    /// Nothing passes from now on.
    func cut() {
        state.withLockedValue { state in
            state.cut = true
            for key in state.pairs.keys { state.pairs[key]?.tainted = true }
        }
    }

    /// The network is back: what was open across the cut is closed, new sockets pass.
    func restore() {
        let stale = state.withLockedValue { state -> [(any Channel, (any Channel)?)] in
            state.cut = false
            let stale = state.pairs.values.filter(\.tainted).map { ($0.client, $0.server) }
            state.pairs = state.pairs.filter { !$0.value.tainted }
            return stale
        }
        for (client, server) in stale {
            client.close(promise: nil)
            server?.close(promise: nil)
        }
    }

    func stop() async {
        try? await server.close()
        let open = state.withLockedValue { state in
            defer { state.pairs = [:] }
            return state.pairs.values.map { ($0.client, $0.server) }
        }
        for (client, server) in open {
            try? await client.close()
            try? await server?.close()
        }
    }

    private func accept(_ client: any Channel, targetPort: Int) -> EventLoopFuture<Void> {
        let key = ObjectIdentifier(client)
        let dropAfter = state.withLockedValue { state in
            state.pairs[key] = (client, nil, state.cut)
            return state.dropAfter
        }
        if let dropAfter {
            client.eventLoop.scheduleTask(in: dropAfter) { client.close(promise: nil) }
        }
        return ClientBootstrap(group: client.eventLoop)
            .channelInitializer { server in
                server.pipeline.addHandler(Forward(to: client, proxy: self))
            }
            .connect(host: "127.0.0.1", port: targetPort)
            .flatMap { server in
                self.state.withLockedValue { $0.pairs[key]?.server = server }
                return client.pipeline.addHandler(Forward(to: server, proxy: self))
            }
            .flatMapError { _ in client.close() }
    }

    /// Passes bytes on to `peer` unless the network is cut; a side that closes closes the other.
    private final class Forward: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let peer: any Channel
        let proxy: CuttableProxy

        init(to peer: any Channel, proxy: CuttableProxy) {
            self.peer = peer
            self.proxy = proxy
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !proxy.isCut else { return }
            peer.writeAndFlush(unwrapInboundIn(data), promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            peer.close(promise: nil)
            context.fireChannelInactive()
        }
    }
}
