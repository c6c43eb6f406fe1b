// The tenant admin console: one page per section (/console/:section), each in a file of its own
// here. Each action is shown only to a role the API allows it (the generated role matrix); the
// API refuses the rest anyway.
import { useParams } from "react-router-dom";
import { useI18n } from "../../i18n";
import { useSession } from "../../session";
import { EmptyState } from "../../components/common";
import { Audit } from "./Audit";
import { Invitations } from "./Invitations";
import { Members } from "./Members";
import { NotifyDefaults } from "./NotifyDefaults";
import { Projects } from "./Projects";
import { Quotas } from "./Quotas";
import { Secrets } from "./Secrets";
import { Signatures } from "./Signatures";
import { Tokens } from "./Tokens";
import { Webhooks } from "./Webhooks";

const SECTIONS: Record<string, () => JSX.Element> = {
  members: Members,
  invitations: Invitations,
  projects: Projects,
  secrets: Secrets,
  quotas: Quotas,
  tokens: Tokens,
  audit: Audit,
  signatures: Signatures,
  webhooks: Webhooks,
  notifications: NotifyDefaults,
};

export default function AdminPage() {
  const { section = "members" } = useParams();
  const { tenant } = useSession();
  const { t } = useI18n();
  if (!tenant) return <EmptyState>{t("common.noTenant")}</EmptyState>;
  const Page = SECTIONS[section] ?? Members;
  return <Page key={tenant.id} />;
}
