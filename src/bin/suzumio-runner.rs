//! `suzumio-runner`: the process that runs inside each agent's container. Until issue [D] wires
//! the control socket, it only reports its version.

fn main() {
    println!("suzumio-runner {}", suzumio::VERSION);
}
