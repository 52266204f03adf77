"""An agent under test (`--agent eval_agents:terse`): it takes the eval's model."""

import flue_nb as flue
from flue_nb.evals import model_under_test


@flue.agent
def terse():
    flue.use_model(model_under_test())
    flue.use_sandbox(flue.kernel())
    return "Answer in as few words as you can."
