import NIOCore
import NIOEmbedded
import Testing
import WhisperShared
@testable import GatewayService

/// A connection's place under the cap and its socket's admission are both let go of by
/// its one close callback, whenever the admission came: before the close, or after it.
@Suite struct ConnectionCapTests {
    private func parts() -> (ConnectionCap, SocketAdmission) {
        (ConnectionCap(limit: 2, metrics: ServiceMetrics(service: "gateway", instanceID: "cap-test")), SocketAdmission(maxTotal: 10, maxPerAddress: 1))
    }

    @Test func aClosedConnectionLetsGoOfItsPlaceAndItsAdmission() throws {
        let (cap, admission) = parts()
        let channel = EmbeddedChannel()
        let hold = try #require(cap.take(channel))
        #expect(admission.admit("10.0.0.1", hold: hold) == .admitted)
        #expect(admission.admit("10.0.0.1", hold: try #require(cap.take(EmbeddedChannel()))) == .addressFull)
        #expect(cap.count == 2 && admission.total == 1)
        #expect(cap.take(EmbeddedChannel()) == nil, "past the cap")
        try channel.close().wait()
        channel.embeddedEventLoop.run()
        #expect(cap.count == 1 && admission.total == 0)
        #expect(admission.refusal(for: "10.0.0.1") == nil, "the address has room again")
    }

    @Test func anAdmissionGivenAfterTheCloseIsLetGoOfAtOnce() throws {
        let (cap, admission) = parts()
        let channel = EmbeddedChannel()
        let hold = try #require(cap.take(channel))
        try channel.close().wait()
        channel.embeddedEventLoop.run()
        #expect(admission.admit("10.0.0.2", hold: hold) == .admitted)
        #expect(admission.total == 0 && cap.count == 0)
    }
}
