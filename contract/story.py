"""The provider guide's story, from application to first earnings, through a client generated
from the served OpenAPI document (openapi-python-client) and nothing else.

Run by scripts/contract.sh: GPUNEX_BASE is the server, GPUNEX_ADMIN the first admin token (from
`gpunex admin create-token`, the documented bootstrap); the generated package is `gpunex_client`
on PYTHONPATH. Every request and answer goes through the generated functions and models.
"""

import datetime
import os
import sys
import time
import uuid

from gpunex_client import AuthenticatedClient, Client
from gpunex_client.api.accounts import accounts_me, accounts_sign_in, accounts_sign_up
from gpunex_client.api.applications import (
    applications_approve,
    applications_claim_provider_token,
    applications_submit,
)
from gpunex_client.api.earnings import earnings_summary
from gpunex_client.api.fleet import fleet_agent_events, fleet_heartbeat, fleet_machine
from gpunex_client.api.market import market_search, market_set_price
from gpunex_client.api.operations import healthz
from gpunex_client.api.rentals import rentals_assignments, rentals_end, rentals_rent
from gpunex_client.api.tokens import tokens_issue
from gpunex_client.models import (
    AgentEventsRequest,
    ApplicationInput,
    Approval,
    Credentials,
    Heartbeat,
    IssueToken,
    RentRequest,
    SetPrice,
)

BASE = os.environ["GPUNEX_BASE"]
ADMIN = os.environ["GPUNEX_ADMIN"]
PASSWORD = "correct horse battery staple"


def step(text):
    print(f"-- {text}", flush=True)


def ok(response, status, what):
    """The parsed body of an answer that must have `status`."""
    if response.status_code != status:
        sys.exit(f"{what}: {response.status_code} {response.content[:500]!r}")
    return response.parsed


def authed(token):
    return AuthenticatedClient(base_url=BASE, token=token, raise_on_unexpected_status=True)


def person(email):
    """Signs up and in: a session client."""
    anonymous = Client(base_url=BASE, raise_on_unexpected_status=True)
    ok(accounts_sign_up.sync_detailed(client=anonymous, body=Credentials(email=email, password=PASSWORD)), 201, "sign up")
    session = ok(accounts_sign_in.sync_detailed(client=anonymous, body=Credentials(email=email, password=PASSWORD)), 201, "sign in")
    return authed(session.token)


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def main():
    anonymous = Client(base_url=BASE, raise_on_unexpected_status=True)
    admin = authed(ADMIN)
    ok(healthz.sync_detailed(client=anonymous), 200, "health")

    step("an applicant signs up and sees the Roles page")
    applicant = person("ada@example.com")
    me = ok(accounts_me.sync_detailed(client=applicant), 200, "me")
    assert "renter" in me.roles, me

    step("applies with the guide's model names")
    form = ApplicationInput.from_dict({
        "full_legal_name": "Ada Lovelace",
        "email": "ada@example.com",
        "gpus": [{
            "model": "H100", "quantity": 2, "system_ram_gb": 512,
            "upload_gbps": "10", "download_gbps": "10",
            "availability": {"kind": "always_on"},
            "location": {"city": "Madrid", "country": "ES", "region": "Madrid"},
        }],
        "ups_protected": True,
        "commitment_months": 12,
        "maintenance_notes": "first Sunday of the month, 02:00-04:00",
    })
    application = ok(applications_submit.sync_detailed(client=applicant, body=form), 201, "apply")
    assert application.form["gpus"][0]["model"] == {"catalog": "h100-80gb"}, application.form
    assert application.unlisted_models == [], application.unlisted_models

    step("a reviewer approves it as Community")
    approved = ok(applications_approve.sync_detailed(application.application_id, client=admin,
                                                   body=Approval(tier="community")), 200, "approve")
    provider_id = approved.provider_id

    step("the applicant claims the provider token")
    claimed = ok(applications_claim_provider_token.sync_detailed(application.application_id, client=applicant), 201, "claim")
    provider = authed(claimed.token)

    step("the provider issues an agent token; the platform mints the machine id")
    issued = ok(tokens_issue.sync_detailed(client=provider, body=IssueToken.from_dict({"role": {"kind": "agent"}})), 201, "agent token")
    machine_id = uuid.UUID(str(issued.role.machine_id))
    agent = authed(issued.token)

    step("the agent registers the machine and sends a heartbeat")
    gpu_uuids = [f"GPU-{machine_id.hex[:20]}-{i:04x}" for i in range(2)]
    registration = AgentEventsRequest.from_dict({"events": [{
        "event_id": str(uuid7()), "occurred_at": now(), "kind": "registration",
        "body": {
            "machine_id": str(machine_id), "agent_version": "story", "simulated": False,
            "host": {"hostname": "node-1", "cpu_model": "AMD EPYC 9654", "cpu_cores": 96,
                     "ram_mib": 524_288, "disk_total_gib": 4_000, "disk_free_gib": 3_500,
                     "os": "Ubuntu 22.04.4 LTS", "kernel": "6.5.0-41-generic"},
            "gpus": [{
                "gpu_uuid": uuid_, "index": i, "name": "NVIDIA H100 80GB HBM3",
                "pci_device_id": 0x2330, "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
                "vram_mib": 81_559, "driver_version": "550.54.15", "cuda_driver_version": "12.4",
                "pcie_current": {"generation": 5, "width": 16}, "pcie_max": {"generation": 5, "width": 16},
                "power_limit_w": 700, "default_power_limit_w": 700, "ecc_enabled": True, "mig_enabled": False,
            } for i, uuid_ in enumerate(gpu_uuids)],
        },
    }]})
    answer = ok(fleet_agent_events.sync_detailed(client=agent, body=registration), 200, "registration")
    assert answer.results[0].status == "recorded", answer
    beat = Heartbeat.from_dict({"machine_id": str(machine_id), "gpus": []})
    ack = ok(fleet_heartbeat.sync_detailed(client=agent, body=beat), 200, "heartbeat")
    assert ack.status == "online", ack
    machine = ok(fleet_machine.sync_detailed(machine_id, client=provider), 200, "machine")
    assert machine.status == "online" and len(machine.gpus) == 2, machine

    step("the provider prices its H100s at 3.60 USDC per GPU-hour")
    ok(market_set_price.sync_detailed(provider_id, client=provider,
                                      body=SetPrice.from_dict({"model_id": "H100", "price_usdc": "3.60"})), 200, "price")

    step("a renter signs up, finds the GPUs and rents one, signed in, without an admin")
    renter = person("grace@example.com")
    found = []
    for _ in range(100):
        page = ok(market_search.sync_detailed(client=anonymous, model="H100"), 200, "search")
        found = [listing.gpu_uuid for listing in page.listings]
        if len(found) == 2:
            break
        time.sleep(0.05)
    assert sorted(found) == sorted(gpu_uuids), found
    rental = ok(rentals_rent.sync_detailed(client=renter, body=RentRequest.from_dict({
        "gpu_uuids": [gpu_uuids[0]],
        "workload": {"image": "nvidia/cuda:12.4.1-base-ubuntu22.04", "command": ["nvidia-smi"]},
    })), 201, "rent")
    assert rental.price_per_gpu_hour_micro_usdc == 3_600_000, rental

    step("the agent sees the assignment, runs the job and reports three GPU-seconds")
    assignments = ok(rentals_assignments.sync_detailed(client=agent), 200, "assignments")
    assert any(a.rental_id == rental.rental_id for a in assignments.assignments), assignments
    started = AgentEventsRequest.from_dict({"events": [{
        "event_id": str(uuid7()), "occurred_at": now(), "kind": "job_started",
        "body": {"machine_id": str(machine_id), "rental_id": str(rental.rental_id), "runtime": "docker", "handle": "c0ffee"},
    }]})
    ok(fleet_agent_events.sync_detailed(client=agent, body=started), 200, "job started")
    time.sleep(3.2)
    ok(fleet_heartbeat.sync_detailed(client=agent, body=beat), 200, "heartbeat")
    usage = AgentEventsRequest.from_dict({"events": [{
        "event_id": str(uuid7()), "occurred_at": now(), "kind": "usage",
        "body": {"machine_id": str(machine_id), "rental_id": str(rental.rental_id), "gpu_seconds": 3},
    }]})
    answer = ok(fleet_agent_events.sync_detailed(client=agent, body=usage), 200, "usage")
    assert answer.results[0].status == "recorded", answer

    step("the renter ends the rental; the provider sees its first earnings")
    ended = ok(rentals_end.sync_detailed(rental.rental_id, client=renter), 200, "end")
    assert ended.status == "ended", ended
    summary = ok(earnings_summary.sync_detailed(provider_id, client=provider), 200, "earnings")
    # 3 GPU-seconds at 1,000 micro-USDC a second: 3,000 charged, 20% Community fee, 2,400 earned.
    assert summary.all_time.net_micro_usdc == 2_400, summary
    print(f"first earnings: {summary.all_time.net_usdc} USDC for provider {provider_id}")


def uuid7():
    """A UUIDv7, as agents choose for their events."""
    millis = int(time.time() * 1000)
    value = (millis << 80) | (0x7 << 76) | (int.from_bytes(os.urandom(2), "big") & 0x0FFF) << 64
    value |= (0b10 << 62) | (int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1))
    return uuid.UUID(int=value)


if __name__ == "__main__":
    main()
    print("the guide's story ran through the generated client")
