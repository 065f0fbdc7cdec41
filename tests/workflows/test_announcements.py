"""When a set tells its backend something (workflows.announcements): only with somewhere to send it."""

from __future__ import annotations

from workflows.announcements import sends_events
from workflows.contract import ActionState, DeploymentTerms, EmojiSetInput, EmojiSetState, Phase, Webhook


def state(*, webhook: Webhook | None, terms: DeploymentTerms | None) -> EmojiSetState:
    input = EmojiSetInput(character_prompt="a cat", actions=["wave"], webhook=webhook)
    actions = [ActionState(action=spec) for spec in input.action_specs()]
    return EmojiSetState(set_id="s", input=input, phase=Phase.CHARACTER, actions=actions, terms=terms)


def test_a_set_sends_events_to_its_own_webhook_or_the_deployments_once_it_has_its_terms() -> None:
    own = Webhook(url="https://example.com/hook")

    assert sends_events(state(webhook=own, terms=DeploymentTerms()))
    assert sends_events(state(webhook=None, terms=DeploymentTerms(webhook=True)))
    assert not sends_events(state(webhook=None, terms=DeploymentTerms()))
    assert not sends_events(state(webhook=own, terms=None)), "a set of an older build, or before its check"
